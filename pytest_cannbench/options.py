"""Command-line options and ini keys, and the frozen settings built from them.

Every option is prefixed ``--cann-`` and every ini key ``cann_`` so the plugin
never clashes with another one (it loads in every pytest run of the
environment). Hooks read a :class:`Settings` from ``config.stash`` instead of
calling ``getoption`` all over the place.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_cannbench.guard.sandbox import SANDBOX_MODES
from pytest_cannbench.taskformat.inputs import INPUT_COMPAT_MODES, INPUT_DISTS
from pytest_cannbench.vocab.registry import DEVICE_CHOICES, checker_help, checker_names, parse_ids
from pytest_cannbench.workers.dispatch import DISPATCH_MODES

ISOLATION_MODES = ("fence", "off")  # issue 20 item 3 (timing/isolation.py)
CUDA_GRAPH_MODES = ("off", "auto", "on")  # issue 20 item 6 (timing/cuda_graph.py); the first is the default

GOLDEN_PRECISIONS = ("fp64_cpu", "native_cpu")
CHECKERS = checker_names()  # vocab.registry.CHECKERS, the default first
BENCHES = ("auto", "cann", "stanford")
KB_ACCURACY = ("kernelbench", "cann")
DEFAULT_KB_TRIALS = 5

DEFAULT_GOLDEN_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
DEFAULT_CASE_TIMEOUT_S = 300.0
DEFAULT_REPORT_DIR = "reports"
DEFAULT_WARMUP = 3
DEFAULT_REPEAT = 10  # docs/timing.md: the median of 10 is within the 3% CV target from 200 us up
DEFAULT_REPEAT_MAX = 100
DEFAULT_TIMING_TARGET_PCT = 2.0
DEFAULT_HAP_TARGET = 0.02  # docs/timing.md, "Why a HAP target too": +-1 of a case's 50 performance points
DEFAULT_TIMING_BUDGET_S = 10.0
PROFILER_LEVELS = ("Level1", "Level0", "Level2")
DEFAULT_GOLDEN_CACHE = ".cannbench-cache/golden"
DEFAULT_MIN_FREE_GIB = 4.0  # never fill the disk with golden cache entries (judge.golden_cache)
DEFAULT_MAX_GIB = 32.0  # what the golden cache may hold between sessions
MIN_GOLDEN_MEMORY_GIB = 1.0
GUARD_MODES = ("block", "warn", "off")
# the KernelBench format's guard policy (guard.policy.mode_for, coverage_floor); the first is the default
KB_GUARDS = ("coverage", "kernelbench", "cann")
SECRET_WORKERINPUT_KEY = "cannbench_secret"


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("cannbench", "CANN Bench operator grading")

    def option(name: str, ini_type: Literal["string", "bool"] = "string", **kwargs: Any) -> None:
        """One ``--cann-x`` option with its ``cann_x`` ini twin (the option wins)."""
        group.addoption(f"--cann-{name}", dest=f"cann_{name.replace('-', '_')}", default=None, **kwargs)
        parser.addini(f"cann_{name.replace('-', '_')}", kwargs.get("help", ""), type=ini_type,
                      default=False if ini_type == "bool" else None)

    option("tasks", metavar="PATH",
           help="task tree to collect when pytest is given no paths (a bench root such as tasks/, "
                "a level directory or one operator directory).")
    option("self-check", ini_type="bool", action="store_true",
           help="grade the goldens themselves, computed in each case's native dtype, as the candidate: "
                "how task authors validate a task tree.")
    option("source", metavar="DIR", action="append",
           help="submission to grade: a directory with a prebuilt dist/cann_bench*.whl (plus an optional "
                "dist/cann_bench*.run) or a build.sh that makes one. Built and installed once per session, "
                "privately; only candidate workers import it. Repeat it to grade several submissions in one "
                "session (a KernelBench generation directory is one candidate per sample).")
    option("no-install", ini_type="bool", action="store_true",
           help="grade the cann_bench package already installed in this environment (no build, no install).")
    option("build-timeout", type=float, metavar="SEC",
           help=f"seconds build.sh may take (default {DEFAULT_BUILD_TIMEOUT_S:g}).")
    option("case-timeout", type=float, metavar="SEC",
           help=f"seconds one candidate call may take before its worker is killed and the case fails as "
                f"timeout (default {DEFAULT_CASE_TIMEOUT_S:g}).")
    option("worker-memory", type=float, metavar="GIB",
           help="resident memory a candidate worker may use before it is killed and the case fails as "
                "oom_killed (default: the session's memory plan, one case's share).")
    option("report-dir", metavar="DIR",
           help=f"directory for logs and reports (default {DEFAULT_REPORT_DIR}/ under the rootdir).")
    option("device", choices=DEVICE_CHOICES,
           help="device the candidate runs and is timed on (default auto: an NPU, else a CUDA GPU, else the CPU).")
    option("device-ids", metavar="IDS",
           help="comma-separated device ids, or 'all'; xdist worker gwK uses ids[K %% len(ids)] (default all: "
                "every card CUDA_VISIBLE_DEVICES/ASCEND_RT_VISIBLE_DEVICES names, else every card of the host).")
    option("warmup", type=int, metavar="N", help=f"untimed calls before timing (default {DEFAULT_WARMUP}).")
    option("repeat", metavar="N|auto",
           help="timed calls per case, each on fresh inputs and verified: a count, or auto (default): at least "
                "--cann-repeat-min, until the speed-up's interval is within --cann-timing-target, the HAP's within "
                "--cann-hap-target, or --cann-timing-budget is spent.")
    option("no-perf", ini_type="bool", action="store_true",
           help="accuracy only: no timing (cases are 'not measured', never zero time).")
    option("no-freq-boost", ini_type="bool", action="store_true",
           help="NPU: skip the frequency-boost warm-up kernel before timing.")
    option("profiler-level", choices=PROFILER_LEVELS, help="NPU profiler level (default Level1).")
    option("hardware", metavar="KEY",
           help="anchor hardware key for metadata/<KEY>.json (default: from the device; the CPU and most "
                "GPUs have no metadata and get live anchors).")
    option("leaderboard", metavar="PATH",
           help="leaderboard JSON written at session end (default <report dir>/leaderboard.json); every case "
                "is also appended to results.jsonl beside it as it finishes.")
    option("resume", ini_type="bool", action="store_true",
           help="skip cases already recorded in results.jsonl for the same submission and configuration.")
    option("hap-cap", ini_type="bool", action="store_true",
           help="clip each case's HAP score at 1 (a bounded reward); the official formula has no cap.")
    option("markdown", metavar="PATH", help="also write a Markdown summary (e.g. $GITHUB_STEP_SUMMARY).")
    option("eval-report", metavar="PATH", help="also write the official EvalReport JSON shape.")
    option("shard", metavar="K/N", help="grade only the K-th of N deterministic shares of the operators.")
    option("reveal-secret", metavar="PATH",
           help="write the session secret (hex) to PATH, mode 0600, after the workers stopped; reports "
                "record only its commitment (config.secret_commitment; `cannbench secret` checks a pair).")
    option("seed", type=int, metavar="N",
           help="evaluation seed mixed into every case seed (default 0, as the official harness). Grading a "
                "submission without it mixes in a per-session secret as well, so inputs cannot be known in "
                "advance; give it to reproduce a run exactly.")
    option("guard", choices=GUARD_MODES,
           help="anti-cheat guard for submissions: block (default) fails a case that delegates to builtin "
                "compute, loads host libraries or tampers with timing; warn records it as a flag; off skips "
                "those checks (containment and the output contract always apply).")
    option("sandbox", choices=SANDBOX_MODES,
           help="OS sandbox around submission code (build.sh, discovery, the candidate worker): auto (default) "
                "uses bubblewrap where it works and otherwise says loudly that it runs without one; bwrap "
                "requires it; off runs with in-process containment only (every case flagged sandbox_off).")
    option("input-dist", choices=INPUT_DISTS,
           help="distribution of generated float inputs inside value_range (default uniform).")
    option("input-compat", choices=INPUT_COMPAT_MODES,
           help="'fixed' (default) honours TensorList value ranges; 'official' reproduces the official "
                "generator bit for bit, including its TensorList range bug.")
    option("golden-precision", choices=GOLDEN_PRECISIONS,
           help="precision of the golden truth: fp64_cpu (default; float inputs up-cast to float64) "
                "or native_cpu (the case's own dtypes).")
    option("golden-cache", metavar="DIR",
           help=f"directory caching golden outputs across runs (default {DEFAULT_GOLDEN_CACHE} under the "
                "rootdir; 'off' disables).")
    option("golden-cache-min-free", type=float, metavar="GIB",
           help=f"the cache stops writing (with a warning, grading goes on) once its disk has less than this "
                f"much free space (default {DEFAULT_MIN_FREE_GIB:g} GiB; 0 writes until the disk is full).")
    option("golden-cache-max", metavar="GIB",
           help=f"at the end of a session the cache's least recently used entries are removed until it holds "
                f"at most this much (default {DEFAULT_MAX_GIB:g} GiB; 'off': no bound).")
    option("golden-timeout", type=float, metavar="SEC",
           help=f"seconds a golden may take for one case before it fails as golden_error "
                f"(default {DEFAULT_GOLDEN_TIMEOUT_S:g}).")
    option("golden-memory", type=float, metavar="GIB",
           help="address-space budget of each golden worker in GiB (default: the session's memory plan, one "
                "case's share plus 2 GiB of unbacked mappings; the kernel's OOM killer is pointed at golden "
                "workers, never at pytest).")
    option("session-memory", type=float, metavar="GIB",
           help="memory the whole session may use, split by the memory plan between its pytest workers and "
                "their golden and candidate workers; a case whose estimated need does not fit its share is "
                "too_large, not run (default: the least of MemAvailable at the start, the cgroup limit and "
                "ulimit -v, less 10%%).")
    option("memory-pool", metavar="auto|machine|GIB",
           help="what the cases in flight may reserve together, each its estimated need, waiting in arrival "
                "order while it cannot fit: auto (default) the largest case plus a third-quartile case per other "
                "worker, so two outliers never run together, and at least 1 GiB per worker; machine: every "
                "worker's whole share of the memory plan; or a number of GiB.")
    option("dispatch", choices=DISPATCH_MODES,
           help="how xdist's load scheduling hands cases to workers: memory (default) largest estimated memory "
                "need first, each to a worker when it fits in the memory pool beside what the other workers "
                "hold; xdist: xdist's own collection-order chunks. Other --dist modes are left as they are.")
    option("checker", choices=CHECKERS, help=f"accuracy checker: {checker_help()}.")
    option("bench", choices=BENCHES,
           help="benchmark format: auto (default: detected from the files), cann (proto.yaml/cases.yaml "
                "operators) or stanford (KernelBench problem files with Model/get_inputs/get_init_inputs).")
    option("kb-trials", type=int, metavar="N",
           help=f"KernelBench: correctness trials per problem, each on its own seed, besides the timed case "
                f"(default {DEFAULT_KB_TRIALS}).")
    option("kb-accuracy", choices=KB_ACCURACY,
           help="KernelBench accuracy: kernelbench (default; allclose atol=rtol=1e-4 fp32, 1e-2 fp16/bf16 "
                "against the reference in the same precision) or cann (the CANN precision standard against "
                "a float64 run of the reference).")
    option("kb-compile", ini_type="bool", action="store_true",
           help="KernelBench: also time torch.compile of the reference Model as a second baseline.")
    option("kb-max-input-gib", type=float, metavar="GIB",
           help="KernelBench: skip (not grade) problems whose get_inputs() makes more than this many GiB "
                "of tensors, sized on the meta device (default: no limit).")
    # issue 17: real submissions, many at a time
    option("kb-guard", choices=KB_GUARDS,
           help="KernelBench, under --cann-guard block: coverage (default) is KernelBench's rule (a custom kernel "
                "must run in forward, builtin ops alongside are flags) and most of the forward's work in the "
                "submission's own kernels (docs/kernelbench.md); kernelbench: KernelBench's rule alone; cann: "
                "--cann-guard as for CANN tasks (block fails any builtin compute).")
    # issue 19: at home in the user's world
    option("rebuild", ini_type="bool", action="store_true",
           help="build from --cann-source's build.sh even when dist/ holds a prebuilt wheel (which is otherwise "
                "graded, with a warning when the sources are newer than it).")
    option("fail-under", type=float, metavar="SCORE",
           help="exit non-zero when the run's total score is below SCORE (a CI gate in one option).")
    # issue 18: the sealed hidden split (docs/hidden-cases.md)
    option("hidden-cases", metavar="DIR",
           help="judge-only hidden cases: a tree mirroring the task tree with a cases.yaml per operator in the "
                "official format (ids never clash with public ones). Graded and scored apart; nothing of them "
                "reaches a report beyond an opaque id, a status and a failure type.")
    option("hidden-generate", type=int, metavar="N",
           help="per operator, N hidden cases generated from the public ones under the session secret (or "
                "--cann-seed): new shapes within the constraints the public cases show (default 0).")
    option("hidden-gate", choices=("on", "off"),
           help="on (default when hidden cases exist): an operator that passes every public case but fails a "
                "hidden one is not_ranked ('fails held-out cases') and scores 0 in the combined total.")
    # issue 20: adaptive, paired timing (docs/timing.md, "Paired, interleaved, adaptive")
    option("timing-target", type=float, metavar="PCT",
           help=f"--cann-repeat auto: stop once the 95%% interval of the paired speed-up is within +-PCT%% of it "
                f"(default {DEFAULT_TIMING_TARGET_PCT:g}).")
    option("hap-target", type=float, metavar="H",
           help=f"--cann-repeat auto: also stop once the 95%% interval of the case's HAP score is within +-H "
                f"(HAP runs 0..1; default {DEFAULT_HAP_TARGET:g}; 0: the speed-up target alone).")
    option("timing-budget", type=float, metavar="SEC",
           help=f"--cann-repeat auto: seconds of a case's timing work (its sets' references, windows and "
                f"verdicts; not waiting for other workers' windows) after which it adds no more sets; the minimum "
                f"count is always timed (default {DEFAULT_TIMING_BUDGET_S:g}).")
    option("repeat-min", type=int, metavar="N",
           help=f"--cann-repeat auto: timed calls every case gets (default {DEFAULT_REPEAT}).")
    option("repeat-max", type=int, metavar="N",
           help=f"--cann-repeat auto: timed calls no case goes beyond (default {DEFAULT_REPEAT_MAX}).")
    option("timing-threads", metavar="N|all",
           help="intra-op threads of the candidate and baseline workers, for their correctness and timed calls, "
                "whatever -n is (default 1; all: every usable core, which the quiet-window fence gives a timed "
                "window). Goldens and comparisons keep each process's share of the cores.")
    option("timing-isolation", choices=ISOLATION_MODES,
           help="fence (default): while a case is timed, the session's other xdist workers hold off their "
                "accuracy work (goldens, candidate calls, comparisons); off lets them run alongside.")
    option("cuda-graph", choices=CUDA_GRAPH_MODES,
           help="CUDA only: time replays of the call captured in a CUDA graph, the L2 clear captured apart and "
                "subtracted (on), only for launch-bound calls whose eager median is under 50 us (auto), or "
                "never (off, default: not yet run on hardware). Falls back to eager timing, with a note, when "
                "the call cannot be captured.")


@dataclass(frozen=True)
class Settings:
    """Everything the plugin needs from the command line, resolved once."""

    tasks: str | None
    self_check: bool
    source: str | None
    no_install: bool
    build_timeout_s: float
    case_timeout_s: float
    worker_memory_gib: float | None
    report_dir: str
    device: str
    device_ids: tuple[int, ...]
    warmup: int
    repeat: int
    perf: bool
    freq_boost: bool
    profiler_level: str
    hardware: str | None
    leaderboard: str
    resume: bool
    hap_cap: bool
    markdown: str | None
    eval_report: str | None
    shard: tuple[int, int] | None
    seed: int
    input_dist: str
    input_compat: str
    golden_precision: str
    golden_cache: str | None
    golden_timeout_s: float
    golden_memory_gib: float | None
    checker: str
    guard: str = "block"
    sandbox: str = "auto"
    # hex; mixed into every input seed when grading a submission without --cann-seed; in no repr (report.secret)
    secret: str = field(default="", repr=False)
    reveal_secret: str | None = None  # --cann-reveal-secret: where the controller writes it at the end
    bench: str = "auto"  # auto | cann | stanford (KernelBench problem files)
    kb_trials: int = DEFAULT_KB_TRIALS
    kb_accuracy: str = "kernelbench"
    kb_compile: bool = False
    kb_max_input_gib: float | None = None
    kb_guard: str = "coverage"  # KernelBench's rule and the kernel coverage floor (guard.coverage)
    sources: tuple[str, ...] = ()  # issue 17: every --cann-source (source is the first)
    rebuild: bool = False
    fail_under: float | None = None
    active: bool = True  # asked(): False leaves the run alone (no collection, files, header or report section)
    hidden_cases: str | None = None  # issue 18: the judge-only hidden tree (absolute), kept from the worker
    hidden_generate: int = 0
    hidden_gate: bool = True

    @property
    def hidden(self) -> bool:
        """Whether this run has a hidden split at all."""
        return bool(self.hidden_cases or self.hidden_generate)
    repeat_auto: bool = True  # --cann-repeat auto: ``repeat`` is then the minimum count (issue 20)
    repeat_max: int = DEFAULT_REPEAT_MAX
    timing_target: float = DEFAULT_TIMING_TARGET_PCT / 100  # a fraction
    hap_target: float = DEFAULT_HAP_TARGET  # absolute, on HAP's 0..1 scale; 0: off
    timing_budget_s: float = DEFAULT_TIMING_BUDGET_S
    timing_isolation: str = "fence"  # fence | off: the quiet-window fence of timing/isolation.py
    timing_threads: int = 1  # threads of a timed call; 0: every usable core (state.timing_threads)
    cuda_graph: str = "off"  # off | auto | on: CUDA-graph timing (timing/cuda_graph.py), CUDA only
    session_memory_gib: float | None = None  # issue 22: the memory plan's total (None: what the machine has)
    memory_pool: str | float = "auto"  # issue 22: the memory pool's size rule, or GiB (workers.memory_pool)
    dispatch: str = "memory"  # memory | xdist: how --dist load hands cases out (workers.dispatch)
    golden_cache_min_free_gib: float = DEFAULT_MIN_FREE_GIB  # the cache's free-disk floor
    golden_cache_max_gib: float | None = DEFAULT_MAX_GIB  # pruned to this at the end of a session; None: no bound

    def as_dict(self) -> dict[str, Any]:
        """Every setting but the secret and where to reveal it (the leaderboard records its commitment)."""
        data = asdict(self)
        del data["secret"], data["reveal_secret"]
        return data


def asked(config: pytest.Config) -> bool:
    """Whether this run is a cannbench run (issue 19): a ``--cann-*`` option or ``cann_*`` ini key was given, or a
    path pytest was pointed at holds a task tree. Otherwise the plugin collects, writes and prints nothing."""
    names = [name for name in vars(config.option) if name.startswith("cann_")]  # each option has its ini twin
    if any(getattr(config.option, name) not in (None, False) or config.getini(name) not in (None, False, "")
           for name in names):
        return True
    from pytest_cannbench.taskformat.dirs import holds_task_tree

    return any(holds_task_tree(Path(str(arg).split("::", 1)[0])) for arg in config.args)


def _value(config: pytest.Config, name: str) -> Any:
    """Option first, then ini key, then None."""
    value = config.getoption(f"cann_{name}", None)
    if value is None or value is False:
        ini = config.getini(f"cann_{name}")
        if ini not in (None, ""):
            return ini
    return value


def _choice(config: pytest.Config, name: str, choices: tuple[str, ...]) -> str:
    value = _value(config, name) or choices[0]
    if value not in choices:
        raise pytest.UsageError(f"cann_{name} = {value!r}: expected one of {', '.join(choices)}")
    return str(value)


def _number(config: pytest.Config, name: str, kind: type, default: Any) -> Any:
    value = _value(config, name)
    if value is None:
        return default
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"cann_{name} = {value!r}: expected a {kind.__name__}") from None


def _flag(config: pytest.Config, name: str) -> bool:
    value = _value(config, name)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _golden_cache(config: pytest.Config) -> str | None:
    value = _value(config, "golden_cache")
    if value is None:
        return str(Path(config.rootpath) / DEFAULT_GOLDEN_CACHE)
    if str(value).strip().lower() in ("off", "none", "no", "0", ""):
        return None
    return os.path.abspath(str(value))


def settings_from_config(config: pytest.Config) -> Settings:
    tasks = _value(config, "tasks")
    timeout = _number(config, "golden_timeout", float, DEFAULT_GOLDEN_TIMEOUT_S)
    memory = _number(config, "golden_memory", float, None)
    if timeout <= 0:
        raise pytest.UsageError("--cann-golden-timeout must be positive")
    seed = _number(config, "seed", int, 0)
    if seed < 0:
        raise pytest.UsageError("--cann-seed must be >= 0 (inputs are always seeded, so runs reproduce)")
    if memory is not None and memory < MIN_GOLDEN_MEMORY_GIB:
        raise pytest.UsageError(f"--cann-golden-memory must be at least {MIN_GOLDEN_MEMORY_GIB:g} GiB: it limits "
                                "address space, and torch alone reserves about 0.6 GiB of it")
    raw_sources = _value(config, "source")
    if isinstance(raw_sources, str):  # the ini key: whitespace-separated directories
        raw_sources = raw_sources.split()
    sources = tuple(os.path.abspath(str(s)) for s in raw_sources or ())
    source = sources[0] if sources else None
    self_check, no_install = _flag(config, "self_check"), _flag(config, "no_install")
    if self_check and (source or no_install):
        raise pytest.UsageError("--cann-self-check grades the goldens; it cannot be combined with --cann-source "
                                "or --cann-no-install")
    if source and no_install:
        raise pytest.UsageError("--cann-no-install grades the installed cann_bench; drop --cann-source")
    for directory in sources:
        if not os.path.isdir(directory):
            raise pytest.UsageError(f"--cann-source {directory}: not a directory")
    build_timeout = _number(config, "build_timeout", float, DEFAULT_BUILD_TIMEOUT_S)
    case_timeout = _number(config, "case_timeout", float, DEFAULT_CASE_TIMEOUT_S)
    worker_memory = _number(config, "worker_memory", float, None)
    if build_timeout <= 0 or case_timeout <= 0:
        raise pytest.UsageError("--cann-build-timeout and --cann-case-timeout must be positive")
    if worker_memory is not None and worker_memory <= 0:
        raise pytest.UsageError("--cann-worker-memory must be positive")
    report_dir = _value(config, "report_dir")
    report_dir = os.path.abspath(str(report_dir)) if report_dir else str(Path(config.rootpath) / DEFAULT_REPORT_DIR)
    warmup = _number(config, "warmup", int, DEFAULT_WARMUP)
    repeat_auto, repeat, repeat_max, target, budget = _repeat(config)
    hap_target = _number(config, "hap_target", float, DEFAULT_HAP_TARGET)
    if not 0 <= hap_target < 0.5:
        raise pytest.UsageError(f"--cann-hap-target {hap_target:g}: expected 0 (off) or a half-width below 0.5")
    if warmup < 0 or repeat < 1:
        raise pytest.UsageError("--cann-warmup must be >= 0 and --cann-repeat >= 1")
    try:
        device_ids = tuple(parse_ids(_value(config, "device_ids")))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    hardware = _value(config, "hardware")
    leaderboard = _value(config, "leaderboard")
    shard = _value(config, "shard")
    if shard:
        from pytest_cannbench.nodes.sharding import parse_shard

        try:
            shard = parse_shard(str(shard))
        except ValueError as exc:
            raise pytest.UsageError(f"--cann-shard: {exc}") from None
    markdown, eval_report = _value(config, "markdown"), _value(config, "eval_report")
    kb_trials = _number(config, "kb_trials", int, DEFAULT_KB_TRIALS)
    kb_max_input = _number(config, "kb_max_input_gib", float, None)
    if kb_trials < 1 or (kb_max_input is not None and kb_max_input <= 0):
        raise pytest.UsageError("--cann-kb-trials must be >= 1 and --cann-kb-max-input-gib positive")
    if tasks and not Path(str(tasks)).exists():
        raise pytest.UsageError(f"--cann-tasks {os.path.abspath(str(tasks))}: no such directory; pass a bench root "
                                "(such as tasks/), a level directory or one operator directory")
    fail_under = _number(config, "fail_under", float, None)
    return Settings(
        tasks=str(tasks) if tasks else None,
        self_check=self_check,
        source=source,
        no_install=no_install,
        build_timeout_s=build_timeout,
        case_timeout_s=case_timeout,
        worker_memory_gib=worker_memory,
        report_dir=report_dir,
        device=_choice(config, "device", DEVICE_CHOICES),
        device_ids=device_ids,
        warmup=warmup,
        repeat=repeat,
        perf=not _flag(config, "no_perf"),
        freq_boost=not _flag(config, "no_freq_boost"),
        profiler_level=_choice(config, "profiler_level", PROFILER_LEVELS),
        hardware=str(hardware) if hardware else None,
        leaderboard=os.path.abspath(str(leaderboard)) if leaderboard else os.path.join(report_dir, "leaderboard.json"),
        resume=_flag(config, "resume"),
        hap_cap=_flag(config, "hap_cap"),
        markdown=os.path.abspath(str(markdown)) if markdown else None,
        eval_report=os.path.abspath(str(eval_report)) if eval_report else None,
        shard=tuple(shard) if shard else None,
        seed=seed,
        input_dist=_choice(config, "input_dist", INPUT_DISTS),
        input_compat=_choice(config, "input_compat", INPUT_COMPAT_MODES),
        golden_precision=_choice(config, "golden_precision", GOLDEN_PRECISIONS),
        golden_cache=_golden_cache(config),
        golden_timeout_s=timeout,
        golden_memory_gib=memory,
        checker=_choice(config, "checker", CHECKERS),
        bench=_choice(config, "bench", BENCHES),
        kb_trials=kb_trials,
        kb_accuracy=_choice(config, "kb_accuracy", KB_ACCURACY),
        kb_compile=_flag(config, "kb_compile"),
        kb_max_input_gib=kb_max_input,
        guard=_choice(config, "guard", GUARD_MODES),
        sandbox=_choice(config, "sandbox", SANDBOX_MODES),
        secret=_session_secret(config, graded=bool(source or no_install), seeded=_value(config, "seed") is not None),
        reveal_secret=_reveal_path(config),
        kb_guard=_choice(config, "kb_guard", KB_GUARDS),
        sources=sources,
        rebuild=_flag(config, "rebuild"),
        fail_under=fail_under,
        active=asked(config),
        **_hidden_options(config),
        repeat_auto=repeat_auto,
        repeat_max=repeat_max,
        timing_target=target,
        hap_target=hap_target,
        timing_budget_s=budget,
        timing_isolation=_choice(config, "timing_isolation", ISOLATION_MODES),
        timing_threads=_timing_threads(config),
        cuda_graph=_choice(config, "cuda_graph", CUDA_GRAPH_MODES),
        session_memory_gib=_session_memory(config),
        memory_pool=_memory_pool(config),
        dispatch=_choice(config, "dispatch", DISPATCH_MODES),
        golden_cache_min_free_gib=_cache_min_free(config),
        golden_cache_max_gib=_cache_max(config),
    )


def _cache_min_free(config: pytest.Config) -> float:
    value = _number(config, "golden_cache_min_free", float, DEFAULT_MIN_FREE_GIB)
    if value < 0:
        raise pytest.UsageError("--cann-golden-cache-min-free must be >= 0 (GiB left free on the cache's disk)")
    return float(value)


def _session_memory(config: pytest.Config) -> float | None:
    value = _number(config, "session_memory", float, None)
    if value is not None and value <= 0:
        raise pytest.UsageError("--cann-session-memory must be positive")
    return value


def _memory_pool(config: pytest.Config) -> str | float:
    from pytest_cannbench.workers.memory_pool import POOL_MODES

    value = _value(config, "memory_pool") or POOL_MODES[0]
    if value in POOL_MODES:
        return str(value)
    try:
        gib = float(value)
    except (TypeError, ValueError):
        gib = 0.0
    if gib <= 0:
        raise pytest.UsageError(f"cann_memory_pool = {value!r}: expected auto, machine or a positive number of GiB")
    return gib


def _hidden_options(config: pytest.Config) -> dict[str, Any]:
    """Issue 18: the hidden split's sources and gate."""
    hidden = _value(config, "hidden_cases")
    if hidden:
        hidden = os.path.abspath(str(hidden))
        if not os.path.isdir(hidden):
            raise pytest.UsageError(f"--cann-hidden-cases {hidden}: not a directory")
    generate = _number(config, "hidden_generate", int, 0)
    if generate < 0:
        raise pytest.UsageError("--cann-hidden-generate must be >= 0")
    gate = _choice(config, "hidden_gate", ("on", "off"))
    return {"hidden_cases": str(hidden) if hidden else None, "hidden_generate": generate,
            "hidden_gate": gate == "on"}


def _repeat(config: pytest.Config) -> tuple[bool, int, int, float, float]:
    """``--cann-repeat`` and its auto mode (issue 20): (auto, count or minimum, maximum, target, budget)."""
    raw = _value(config, "repeat")
    auto = raw is None or str(raw).strip().lower() == "auto"
    count = _number(config, "repeat_min", int, DEFAULT_REPEAT) if auto else _number(config, "repeat", int, 0)
    maximum = _number(config, "repeat_max", int, DEFAULT_REPEAT_MAX)
    target = _number(config, "timing_target", float, DEFAULT_TIMING_TARGET_PCT)
    budget = _number(config, "timing_budget", float, DEFAULT_TIMING_BUDGET_S)
    if auto and (maximum < count or target <= 0 or budget < 0):
        raise pytest.UsageError("--cann-repeat auto needs --cann-repeat-max >= --cann-repeat-min, a positive "
                                "--cann-timing-target and a --cann-timing-budget >= 0")
    return auto, count, maximum, target / 100, budget


def _timing_threads(config: pytest.Config) -> int:
    """``--cann-timing-threads``: a positive count, or ``all`` (0)."""
    raw = _value(config, "timing_threads")
    if raw is None or str(raw).strip() == "":
        return 1
    if str(raw).strip().lower() == "all":
        return 0
    try:
        count = int(raw)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise pytest.UsageError(f"cann_timing_threads = {raw!r}: expected a positive count or 'all'")
    return count


def _session_secret(config: pytest.Config, *, graded: bool, seeded: bool) -> str:
    """One secret per session, made by the controller and handed to xdist workers (see plugin.XdistHooks):
    a submission cannot precompute or recognise inputs it has never seen."""
    if not graded or seeded:
        return ""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and SECRET_WORKERINPUT_KEY in workerinput:
        return str(workerinput[SECRET_WORKERINPUT_KEY])
    return os.urandom(16).hex()


def _reveal_path(config: pytest.Config) -> str | None:
    """``--cann-reveal-secret``: a file in an existing directory (checked now, written at the end)."""
    path = os.path.abspath(str(_value(config, "reveal_secret") or "")) if _value(config, "reveal_secret") else None
    if path is not None and (os.path.isdir(path) or not os.path.isdir(os.path.dirname(path))):
        raise pytest.UsageError(f"--cann-reveal-secret {path}: expected a file in an existing directory")
    return path


def _cache_max(config: pytest.Config) -> float | None:
    value = _value(config, "golden_cache_max")
    if value is None:
        return DEFAULT_MAX_GIB
    if str(value).strip().lower() in ("off", "none", "inf"):
        return None
    try:
        gib = float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"--cann-golden-cache-max={value!r}: expected GiB (e.g. 20) or 'off'") from None
    if not gib >= 0:
        raise pytest.UsageError("--cann-golden-cache-max must be >= 0 GiB, or 'off' for no bound")
    return gib


def settings_for(**overrides: Any) -> Settings:
    """Settings without pytest (the grading core's front-ends): a bare cannbench run's defaults, then
    ``overrides`` by field name. Paths are made absolute from the current directory; no golden cache unless one
    is named; a source graded without a ``seed`` mixes in a fresh secret, as a pytest run does."""
    unknown = sorted(set(overrides) - set(Settings.__dataclass_fields__))
    if unknown:
        raise TypeError(f"settings_for: unknown setting(s) {', '.join(unknown)} (see options.Settings)")
    report_dir = os.path.abspath(str(overrides.get("report_dir") or "reports"))
    source = overrides.get("source")
    sources = tuple(overrides.get("sources") or ((source,) if source else ()))
    seeded = overrides.get("seed") is not None
    values: dict[str, Any] = dict(
        tasks=None, self_check=False, source=None, no_install=False, build_timeout_s=600.0, case_timeout_s=300.0,
        worker_memory_gib=None, report_dir=report_dir, device="auto", device_ids=(), warmup=3, repeat=10,
        perf=True, freq_boost=True, profiler_level="Level1", hardware=None,
        leaderboard=os.path.join(report_dir, "leaderboard.json"), resume=False, hap_cap=False, markdown=None,
        eval_report=None, shard=None, seed=0, input_dist="uniform", input_compat="fixed",
        golden_precision="fp64_cpu", golden_cache=None, golden_timeout_s=DEFAULT_GOLDEN_TIMEOUT_S,
        golden_memory_gib=None, checker="relative_error")
    values.update({k: v for k, v in overrides.items() if v is not None or k not in ("seed",)})
    values["report_dir"], values["sources"] = report_dir, sources
    if values.get("tasks"):
        values["tasks"] = os.path.abspath(str(values["tasks"]))
    if values.get("source"):
        values["source"] = os.path.abspath(str(values["source"]))
        values["sources"] = tuple(os.path.abspath(str(s)) for s in sources)
    if "secret" not in overrides and not seeded and (values.get("source") or values.get("no_install")):
        values["secret"] = os.urandom(16).hex()
    return Settings(**values)


SETTINGS_KEY = pytest.StashKey[Settings]()  # the run's settings on config.stash, from pytest_configure on
