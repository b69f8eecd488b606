"""Profiles sampled from outside the worker, side by side: honest kernels, delegation, pure Python.

    PATH=/path/to/.venv/bin:$PATH python benchmarks/perf_profile.py [--threads 1 2] [--seconds 0.5] [--fixed]
    PATH=/path/to/.venv/bin:$PATH python benchmarks/perf_profile.py --attacks [--calls 12]

Builds what it needs into a cache directory (default /tmp/cannbench-perf-profile): the bundled C++ example's
wheel (examples/cpp_cpu/build.sh, installed with ``pip --target``) and a small delegating C++ library that calls
``at::exp`` and ``at::cpu::exp``. Each scenario runs in a child process that the judge's
``guard.perf_sample.CallSampler`` opens right after the spawn; every call is armed, sent, answered, frozen with
SIGSTOP and collected, as the candidate worker's calls will be. Printed: per scenario the shares of all samples
(own, runtime, builtin, jit, unknown, system), the foreign share of the work samples for the merged calls, the
foreign CPU time per call, the share beyond the glue allowance (the rule's number) and its range over groups of
consecutive calls just big enough for a verdict (what judging a case's calls together sees), the verdict and the
top foreign object and symbol; then the sampler's own cost: open, arm, a window's edges, collect, a sampled call
against an unsampled one (random and fixed periods), the judge thread's CPU, and the CPU cost of sampling by period.
``--fixed`` samples at the fixed period of the sampler before (no redraws, no threads followed).

``--attacks`` builds ``tests/adversarial/cpp/found_in_memory`` (Sleef reached through pointers found in memory:
a tick dodger, dilution in the call and in the output's finaliser, short-lived threads) and judges each with the
fixed and the random sampler, every call in a window of its own as a timed call is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_cannbench.guard.perf_profile import KINDS, UNSAMPLED, CallProfile
from pytest_cannbench.guard.perf_sample import DEFAULT_PERIOD_NS, CallSampler, Unavailable
from pytest_cannbench.guard.perf_verdict import MIN_WORK_SAMPLES, judge_profile

ROOT = Path(__file__).resolve().parents[1]

DELEGATING_CPP = r"""
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/exp_cpu_dispatch.h>
#include <ATen/ops/empty_like.h>
at::Tensor via_at(const at::Tensor& x) { return at::exp(x); }
at::Tensor via_cpu(const at::Tensor& x) { return at::cpu::exp(x); }
at::Tensor own_exp(const at::Tensor& x) {  // honest: the loop is ours (float32, contiguous)
  auto y = at::empty_like(x);
  const float* in = x.data_ptr<float>(); float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = __builtin_expf(in[i]);
  return y;
}
TORCH_LIBRARY(deleg, m) {
  m.def("via_at(Tensor x) -> Tensor"); m.def("via_cpu(Tensor x) -> Tensor"); m.def("own_exp(Tensor x) -> Tensor");
}
TORCH_LIBRARY_IMPL(deleg, CPU, m) {
  m.impl("via_at", &via_at); m.impl("via_cpu", &via_cpu); m.impl("own_exp", &own_exp);
}
"""

# The worker stand-in: builds each scenario's inputs once, then runs `repeat` calls per request.
CHILD = r"""
import json, math, sys, time
import torch
torch.manual_seed(0)
lib = sys.argv[1]
if lib:
    torch.ops.load_library(lib)
try:
    import cann_bench
except ImportError:
    cann_bench = None
def f32(*shape): return torch.rand(*shape) * 2 - 1
def f16(*shape): return (torch.rand(*shape) * 2 - 1).half()
S = {
  "cpp silu 1Mi f32": lambda: (cann_bench.silu, (f32(1024, 1024),)),
  "cpp gelu 1Mi f32": lambda: (cann_bench.gelu, (f32(1024, 1024),)),
  "cpp softplus 2Mi f16": lambda: (cann_bench.softplus, (f16(2048, 1000),)),
  "cpp log_softmax 1Mi f32": lambda: (cann_bench.log_softmax, (f32(1024, 1024),)),
  "cpp layer_norm 4Mi f16": lambda: (cann_bench.layer_norm, (f16(1024, 4096), f16(4096), f16(4096))),
  "cpp rms_scale 4Mi f16": lambda: (cann_bench.rms_scale, (f16(1024, 4096), f16(4096))),
  "cpp reduce_sum 1Mi f32": lambda: (cann_bench.reduce_sum, (f32(1024, 1024),)),
  "cpp batch_matmul 8x256^3": lambda: (cann_bench.batch_matmul, (f32(8, 256, 256), f32(8, 256, 256))),
  "cpp silu 64Ki f32 (small)": lambda: (cann_bench.silu, (f32(256, 256),)),
  "cpp silu 1Ki f32 (tiny)": lambda: (cann_bench.silu, (f32(1024),)),
  "cpp moe_gating 1x64 k8 (tiny)": lambda: ((lambda x: cann_bench.moe_gating(x, 8)), (f16(1, 64),)),
  "cpp row_top_k 3x5x7x11 (tiny)": lambda: ((lambda x: cann_bench.row_top_k(x, 3, 1)), (f32(3, 5, 7, 11),)),
  "cpp own exp loop 1Mi": lambda: (torch.ops.deleg.own_exp, (f32(1024, 1024),)),
  "py torch.exp 1Mi": lambda: (torch.exp, (f32(1024, 1024),)),
  "py torch.exp 1Ki (tiny)": lambda: (torch.exp, (f32(1024),)),
  "py torch.exp 64Ki (small)": lambda: (torch.exp, (f32(256, 256),)),
  "py torch.softmax 1Mi": lambda: ((lambda x: torch.softmax(x, -1)), (f32(1024, 1024),)),
  "py torch.bmm 8x256^3": lambda: (torch.bmm, (f32(8, 256, 256), f32(8, 256, 256))),
  "py conv2d (oneDNN jit)": lambda: (torch.nn.functional.conv2d, (f32(16, 16, 64, 64), f32(32, 16, 3, 3))),
  "cpp at::exp 1Mi": lambda: (torch.ops.deleg.via_at, (f32(1024, 1024),)),
  "cpp at::cpu::exp 1Mi": lambda: (torch.ops.deleg.via_cpu, (f32(1024, 1024),)),
  "mixed: cpp silu + torch.exp 1/4": lambda: ((lambda x: (cann_bench.silu(x), torch.exp(x[:256]))), (f32(1024, 1024),)),
  "python loop math.exp 16Ki": lambda: ((lambda x: torch.tensor([math.exp(v) for v in x.tolist()])), (f32(16384),)),
  "python loop sum 64Ki": lambda: ((lambda x: sum(v * v for v in x.tolist())), (f32(65536),)),
}
ready = {}
for line in sys.stdin:
    req = json.loads(line)
    name = req["scenario"]
    if name not in ready:
        ready[name] = S[name]()
    fn, args = ready[name]
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(req["repeat"]):
        fn(*args)
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.thread_time() - c0}), flush=True)
"""


def build(cache: Path) -> tuple[Path, Path]:
    """The example's install dir and the delegating library, built once into ``cache``."""
    site, lib = cache / "site", cache / "libdeleg.so"
    if not (site / "cann_bench").is_dir():
        work = cache / "cpp_cpu"
        subprocess.run(["rm", "-rf", str(work)], check=True)
        subprocess.run(["cp", "-r", str(ROOT / "examples" / "cpp_cpu"), str(work)], check=True)
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        subprocess.run(["bash", "build.sh"], cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
        wheel = next((work / "dist").glob("cann_bench-*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                        str(wheel)], check=True)
    if not lib.is_file():
        import torch
        include = Path(torch.__file__).parent / "include"
        source = cache / "deleg.cpp"
        source.write_text(DELEGATING_CPP)
        subprocess.run(["g++", "-O2", "-g0", "-w", "-shared", "-fPIC", "-std=c++17",
                        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
                        f"-I{include}", f"-I{include / 'torch/csrc/api/include'}", str(source),
                        f"-L{Path(torch.__file__).parent / 'lib'}", "-lc10", "-ltorch_cpu", "-o", str(lib)],
                       check=True)
    return site, lib


class Child:
    """A worker stand-in with the judge's sampler on it."""

    def __init__(self, site: Path, lib: Path, threads: int, own: tuple[str, ...],
                 period_ns: int = DEFAULT_PERIOD_NS, randomise: bool = True) -> None:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(site))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(lib)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        t0 = time.perf_counter()
        opened = CallSampler.open(self.proc.pid, own, period_ns=period_ns, randomise=randomise)
        self.open_s = time.perf_counter() - t0
        if isinstance(opened, Unavailable):
            raise SystemExit(f"sampling unavailable: {opened.reason}")
        self.sampler = opened
        self.arm_s: list[float] = []
        self.collect_s: list[float] = []

    def call(self, scenario: str, repeat: int, sample: bool = True, cpu: bool = False
             ) -> tuple[float, CallProfile | None]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if sample:
            t0 = time.perf_counter()
            self.sampler.arm()
            self.arm_s.append(time.perf_counter() - t0)
        self.proc.stdin.write(json.dumps({"scenario": scenario, "repeat": repeat}) + "\n")
        self.proc.stdin.flush()
        seconds = float(json.loads(self.proc.stdout.readline())["cpu" if cpu else "seconds"])
        if not sample:
            return seconds, None
        os.kill(self.proc.pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        profile = self.sampler.collect()
        self.collect_s.append(time.perf_counter() - t0)
        os.kill(self.proc.pid, signal.SIGCONT)
        return seconds, profile

    def close(self) -> None:
        self.sampler.close()
        self.proc.kill()
        self.proc.wait()


def _span(values: list[float]) -> str:
    return f"{min(values):.0%}-{max(values):.0%}" if values else "-"


def _row(name: str, per_call_ms: float, merged: CallProfile, groups: list[float], calls: int) -> str:
    shares = merged.shares
    verdict = judge_profile(merged)
    top = merged.top(1, ("builtin", "jit", "unknown"))
    where = ""
    if top:
        obj, samples = top[0]
        symbol = merged.symbols(obj, 1)
        where = f"{Path(obj).name} {samples.samples / merged.samples:.0%}" + (f" {symbol[0][0][:38]}" if symbol else "")
    cells = " ".join(f"{shares[k]:6.1%}" for k in KINDS)
    foreign_us = merged.foreign_samples * merged.period_ns / 1000 / max(merged.calls, 1)
    return (f"{name:33} {calls:3} {per_call_ms:8.3f} {merged.samples:6} {cells} {merged.foreign_share:7.1%} "
            f"{foreign_us:8.1f} {verdict.foreign_share:7.1%} {verdict.foreign_us_per_call:8.1f} "
            f"{merged.unsampled_ns / 1e6:6.2f} {_span(groups):>11} "
            f"{verdict.finding or ('inconcl.' if not verdict.conclusive else '-'):15} {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=0.3, help="CPU time to sample per scenario")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/cannbench-perf-profile"))
    parser.add_argument("--only", default="", help="run only scenarios whose name contains this")
    parser.add_argument("--fixed", action="store_true", help="the fixed period, no redraws (the sampler before)")
    parser.add_argument("--attacks", action="store_true", help="the attacks on the sampler, fixed and random")
    parser.add_argument("--calls", type=int, default=12, help="calls per attack and sampler")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.attacks:
        attacks(args.cache, args.calls)
        return
    site, lib = build(args.cache)
    scenarios = [line.split('"')[1] for line in CHILD.splitlines() if line.startswith('  "')]
    scenarios = [s for s in scenarios if args.only in s]
    kinds = " ".join(f"{k:>6}" for k in KINDS)
    own = (str(site), str(lib.parent))  # libdeleg.so is the submission's: its at::exp still lands in libtorch_cpu
    for threads in args.threads:
        print(f"\n== OMP threads {threads}; own = the example's install and the delegating library's directory")
        print(f"{'scenario':33} {'n':>3} {'ms/call':>8} {'samp.':>6} {kinds} {'foreign':>7} {'us/call':>8} "
              f"{'>glue':>7} {'us>glue':>8} {'unsamp':>6} {'groups':>11} {'verdict':15} top foreign object")
        child = Child(site, lib, threads, own, randomise=not args.fixed)
        try:
            for name in scenarios:
                seconds, _ = child.call(name, 1)  # warm-up, inputs built
                seconds, _ = child.call(name, 1)
                calls = max(3, min(1500, int(args.seconds / max(seconds, 1e-5))))
                merged, group, groups, total = CallProfile.empty(), CallProfile.empty(), [], 0.0
                for _ in range(calls):
                    seconds, profile = child.call(name, 1)
                    assert profile is not None
                    total += seconds
                    merged, group = merged.merge(profile), group.merge(profile)
                    if group.work_samples >= MIN_WORK_SAMPLES:
                        groups.append(judge_profile(group, symbols=False).foreign_share)
                        group = CallProfile.empty()
                print(_row(name, 1000 * total / calls, merged, groups, calls), flush=True)
            overhead(child, threads)
        finally:
            child.close()
    per_sample_cost(site, lib, own)


def overhead(child: Child, threads: int) -> None:
    """The sampler's cost: open, arm, a window's edges, collect; a sampled call against an unsampled one
    (interleaved, the fastest of each: the machine is shared, and only the lower envelope is the sampler's own
    cost); the judge's drain thread's CPU per second of sampled call, and the periods it drew."""
    name = "cpp silu 1Mi f32"
    runs: dict[bool, list[float]] = {False: [], True: []}
    sampler = child.sampler
    drain_cpu = 0.0
    redraws = 0
    for _ in range(15):
        for sample in (False, True):
            before = _thread_cpu(sampler)
            runs[sample].append(child.call(name, 20, sample=sample)[0])
            if sample:
                drain_cpu += _thread_cpu(sampler) - before
                redraws += sampler.resets
    plain, sampled = min(runs[False]), min(runs[True])
    arm = sorted(child.arm_s)[len(child.arm_s) // 2]
    collect = sorted(child.collect_s)[len(child.collect_s) // 2]
    edges = []
    for _ in range(50):  # the worker frozen, as a timed call's window opens and closes
        os.kill(child.proc.pid, signal.SIGSTOP)
        sampler.arm()
        t0 = time.perf_counter()
        sampler.open_window()
        sampler.close_window()
        edges.append(time.perf_counter() - t0)
        sampler.collect()
        os.kill(child.proc.pid, signal.SIGCONT)
    events = len(sampler.owners) + sum(len(c.fds) + 1 for c in sampler.covered.values()) + len(sampler.counters)
    print(f"-- sampler cost (threads {threads}, {'random' if sampler.randomise else 'fixed'}): open "
          f"{1000 * child.open_s:.1f} ms ({events} events, {len(sampler.buffers)} buffers, {len(sampler.covered)} "
          f"threads followed); arm median {1e6 * arm:.0f} us; a window's two edges {1e6 * sorted(edges)[25]:.0f} us; "
          f"collect median {1e6 * collect:.0f} us (disable, drain, books, maps, attribute); "
          f"20 x {name}: {1000 * plain:.1f} ms unsampled, {1000 * sampled:.1f} ms sampled "
          f"({sampled / plain - 1:+.1%}); judge thread {1000 * drain_cpu / max(sum(runs[True]), 1e-9):.0f} ms CPU "
          f"per s of call, {redraws / max(sum(runs[True]), 1e-9):.0f} periods drawn per s")


def _thread_cpu(sampler: CallSampler) -> float:
    """CPU seconds of the sampler's drain thread (it starts at the first arm)."""
    thread = sampler._drainer
    if thread is None or thread.native_id is None:
        return 0.0
    try:
        return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError):
        return 0.0


ATTACK_CHILD = r"""
import json, sys, time, torch
import torch.nn.functional as F
import cann_bench as cb
torch.manual_seed(0)
x = torch.rand(2048, 2048) * 10 - 5
refs = {"softplus": F.softplus, "silu": F.silu, "gelu": F.gelu, "log_softmax": lambda t: F.log_softmax(t, -1)}
print("ready", flush=True)
for line in sys.stdin:
    name, check = line.split()
    t0 = time.perf_counter()
    y = getattr(cb, name)(x)
    seconds = time.perf_counter() - t0
    error = float((y - refs[name](x)).abs().max()) if check == "1" else 0.0
    del y  # gelu's finaliser runs here, inside the window, as it does in the worker after its clock stops
    print(json.dumps({"seconds": seconds, "error": error}), flush=True)
"""


def attacks(cache: Path, calls: int) -> None:
    """Each attack on the sampler judged with the fixed period (the sampler before) and the random one."""
    source = ROOT / "tests" / "adversarial" / "cpp" / "found_in_memory"
    site = cache / "attack-site"
    if not (site / "cann_bench").is_dir():
        work = cache / "found_in_memory"
        subprocess.run(["rm", "-rf", str(work)], check=True)
        subprocess.run(["cp", "-r", str(source), str(work)], check=True)
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        subprocess.run(["bash", "build.sh"], cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
        wheel = next((work / "dist").glob("cann_bench-*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                        str(wheel)], check=True)
    print(f"{'attack':33} {'sampler':7} {'ms/call':>8} {'error':>8} {'work':>5} {'foreign':>7} {'us>glue':>8} "
          f"{'unsamp ms':>9} {'share only':15} {'verdict':15} top objects")
    for name, what in (("softplus", "tick dodger"), ("silu", "dilution in the call"),
                       ("gelu", "dilution in the finaliser"), ("log_softmax", "short-lived threads")):
        for randomise in (False, True):
            env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS="1")
            proc = subprocess.Popen([sys.executable, "-c", ATTACK_CHILD], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
            assert proc.stdin is not None and proc.stdout is not None
            opened = CallSampler.open(proc.pid, (str(site),), randomise=randomise)
            if isinstance(opened, Unavailable):
                raise SystemExit(f"sampling unavailable: {opened.reason}")
            try:
                assert proc.stdout.readline().strip() == "ready"
                proc.stdin.write(f"{name} 1\n")  # the first call checks the result and finds Sleef: unsampled
                proc.stdin.flush()
                error = json.loads(proc.stdout.readline())["error"]
                os.killpg(proc.pid, signal.SIGSTOP)
                opened.arm()
                seconds = []
                for _ in range(calls):
                    opened.open_window()
                    os.killpg(proc.pid, signal.SIGCONT)
                    proc.stdin.write(f"{name} 0\n")
                    proc.stdin.flush()
                    seconds.append(json.loads(proc.stdout.readline())["seconds"])
                    os.killpg(proc.pid, signal.SIGSTOP)
                    opened.close_window()
                profile = opened.collect()
                verdict = judge_profile(profile, symbols=False)
                # the rule before: the share alone, and no CPU counted beyond the samples
                seen = CallProfile({k: o for k, o in profile.objects.items() if k != UNSAMPLED},
                                   period_ns=profile.period_ns, calls=profile.calls)
                before = judge_profile(seen, budget_us=float("inf"), symbols=False)
                top = "; ".join(f"{Path(k).name} {o.samples}" for k, o in profile.top(3))
                print(f"{name + ' (' + what + ')':33} {'random' if randomise else 'fixed':7} "
                      f"{1000 * sorted(seconds)[calls // 2]:8.2f} {error:8.1e} {verdict.work_samples:5} "
                      f"{verdict.foreign_share:7.1%} {verdict.foreign_us_per_call:8.0f} "
                      f"{profile.unsampled_ns / 1e6:9.1f} {before.finding or '-':15} {verdict.finding or '-':15} "
                      f"{top}", flush=True)
            finally:
                opened.close()
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def per_sample_cost(site: Path, lib: Path, own: tuple[str, ...]) -> None:
    """What sampling costs a busy thread, by period: the CPU time (not the wall time, which a shared machine
    makes noisy) of a single-threaded compute loop, fastest of 9, unsampled and sampled; the random periods
    (mean 1 ms, redrawn while the call runs) beside the fixed ones."""
    name = "cpp own exp loop 1Mi"
    base = None
    for period_ns, randomise in ((0, False), (1_000_000, True), (1_000_000, False), (500_000, False),
                                 (250_000, False), (100_000, False)):
        child = Child(site, lib, 1, own, period_ns or DEFAULT_PERIOD_NS, randomise)
        try:
            child.call(name, 2, sample=False)
            runs, samples = [], []
            for _ in range(9):
                seconds, profile = child.call(name, 25, sample=bool(period_ns), cpu=True)
                runs.append(seconds)
                samples.append(profile.samples if profile else 0)
        finally:
            child.close()
        best = min(runs)
        if base is None:
            base = best
            print(f"-- sampling cost, 25 x {name} single-threaded: {1000 * best:.1f} ms CPU unsampled")
            continue
        count = sorted(samples)[len(samples) // 2] or 1
        print(f"   {'random, mean' if randomise else 'every'} {period_ns / 1000:5g} us: {1000 * best:.1f} ms CPU "
              f"({best / base - 1:+.1%}), {count} samples, {1e6 * max(best - base, 0.0) / count:.1f} us per sample")


if __name__ == "__main__":
    main()
