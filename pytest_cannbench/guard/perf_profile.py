"""Where a worker's sampled CPU time went, and whether that is delegation to builtin compute.

Each sampled instruction pointer is attributed to the object mapped at that address in /proc/<pid>/maps (read
by the judge while the worker is frozen, after every call: libraries can be loaded at any time) and classed:

- ``own``: objects under the submission's private install (the prefixes the caller passes);
- ``runtime``: the language runtime every submission runs on: the interpreter and its stdlib extension
  modules, libc/libm/ld.so/libstdc++/libgcc, and libtorch_python, torch's Python binding (argument parsing,
  tensor <-> list conversion, no kernels: it held up to a third of an honest Python loop's samples, measured);
- ``system``: time that is no one's compute: [kernel] (page faults of fresh allocations, futexes), [vdso], the
  OpenMP runtime (threads spinning at a barrier; measured at 40% of a 2-thread torch.exp on a busy machine) and
  a card's driver and runtime (libcuda, libcudart: launching, and spinning while the card computes), and a
  kernel compiler's time: Triton's ``libtriton.so`` (its MLIR/LLVM passes, at a kernel's first launch) and
  ``[toolchain]``, the samples of the worker's child processes when it may start none (containment, seen in force
  by the judge): the compiler helper's tools, ptxas and cc (``attribute(toolchain_except=...)``). Seen on an
  H200: a Triton kernel's first call spent 30-55% of its samples compiling, and every case was refused as builtin
  compute. And ``[profiler]``: the functions of torch's profiler inside a builtin library (by symbol), the
  in-worker guard's own recording of the call (up to 3 ms per correctness call, its session's start and end);
  It is reported but left out of the shares that judge: it would otherwise dilute delegation;
- ``jit``: anonymous executable memory. Not the submission's by default: torch's own oneDNN generates its
  conv2d and bf16 matmul kernels there (measured: docs/security.md), and honest submissions compile ahead;
- ``unknown``: an address no mapping holds once the call is over (code unmapped during the call), and
  ``[unsampled]``: CPU time the kernel counted on threads born inside the call that their samples do not account
  for (a thread that ends before its first period is never sampled), beyond an allowance (``perf_sample``);
- ``builtin``: everything else: libtorch_cpu, libc10, MKL, oneDNN, OpenBLAS, sleef, numpy's libraries,
  and a copy of one of those shipped in the private install (named like a builtin library).

Paths are as the worker sees them (its mount namespace); classing needs only the string, naming a symbol opens
the file through /proc/<pid>/root first and falls back to the bare object name.
"""

from __future__ import annotations

import bisect
import re
import sys
import sysconfig
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.guard.elf_lookup import symbol_table

OWN, RUNTIME, SYSTEM, BUILTIN, JIT, UNKNOWN = "own", "runtime", "system", "builtin", "jit", "unknown"
KINDS = (OWN, RUNTIME, SYSTEM, BUILTIN, JIT, UNKNOWN)
WORK_KINDS = (OWN, RUNTIME, BUILTIN, JIT, UNKNOWN)  # where computing can happen
FOREIGN_KINDS = (BUILTIN, JIT, UNKNOWN)  # code that is not the submission's nor the language's
KERNEL, VDSO, ANON_EXEC, UNMAPPED, TOOLCHAIN = "[kernel]", "[vdso]", "[anon exec]", "[unmapped]", "[toolchain]"
UNSAMPLED, PROFILER = "[unsampled]", "[profiler]"
# torch's profiler, as the in-worker guard runs it around each call (its session, RecordFunction's callbacks, kineto's
# trace): the judge's machinery, no one's compute. Matched on the demangled symbol, anywhere in it (a return type or
# a template argument comes first); a compute kernel has none of these names.
PROFILER_SYMBOL = re.compile(r"(^|[\s:<(,*&])(torch::profiler::|torch::autograd::profiler::|libkineto::"
                             r"|c10::ApproximateClockToUnixTimeConverter|at::RecordFunction\b|at::getStepCallbacks"
                             r"|at::\(anonymous namespace\)::"
                             r"(CacheEntry|LocalCallbackManager|GlobalCallbackManager)\b)")

RUNTIME_LIBRARY = re.compile(
    r"^(python3(\.\d+)*|libpython3[\d.]*\.so.*|ld-linux.*\.so.*|ld64\.so.*|ld-[\d.]+\.so"
    r"|lib(c|m|mvec|dl|rt|pthread|util|resolv|crypt|anl)(-[\d.]+)?\.so.*"
    r"|libstdc\+\+\.so.*|libgcc_s\.so.*|libatomic\.so.*|libtorch_python\.so"
    r"|lib(ffi|z|bz2|lzma|expat|uuid|ssl|crypto|sqlite3|ncursesw?|tinfo|readline|mpdec|gdbm)\.so.*)$")
OPENMP_LIBRARY = re.compile(r"^lib(gomp|iomp5|omp)(-[0-9a-f]+)?\.so.*$")  # threads and barriers, no kernels
# a card's user-space driver and runtime: launches, copies submitted, and the host spinning while it waits on the
# card (seen on an H200: 28-43% of an honest CUDA kernel's samples were in libcuda). The card's compute is its
# timer's and its op trace's to judge; on the host these are waiting, like OpenMP's barriers.
DEVICE_DRIVER_LIBRARY = re.compile(r"^lib(cuda|cudart|cupti|nvidia-[a-z0-9-]+|amdhip64|hsa-runtime64|ascendcl)"
                                   r"([-.][\w.-]*)?\.so.*$")
# a kernel compiler's in-process library (trusted roots only): compiling, not computing a result
COMPILER_LIBRARY = re.compile(r"^libtriton\.so$")
# builtin libraries by name: a copy in the private install is still builtin code
BUILTIN_LIBRARY = re.compile(
    r"^lib(torch|torch_cpu|torch_global_deps|c10|shm|mkl\w*|dnnl|mkldnn|openblas\w*|blas|cblas"
    r"|lapack\w*|sleef|fbgemm|xnnpack|nnpack|qnnpack|pytorch_qnnpack|onednn|numpy\w*|scipy\w*|gfortran)"
    r"([-.].*)?\.so.*$")


def _runtime_dirs() -> tuple[str, ...]:
    """The interpreter's own extension-module directories (lib-dynload): part of the runtime."""
    found = {str(Path(p) / "lib-dynload") for p in (sysconfig.get_path("platstdlib"), sysconfig.get_path("stdlib"))
             if p}
    return tuple(sorted(d.rstrip("/") + "/" for d in found))


RUNTIME_DIRS = _runtime_dirs()
# where the runtime and OpenMP libraries are recognised by name: the system and the interpreter's installs, which
# the submission cannot write (read-only under the sandbox). A libc.so or libgomp.so anywhere else, say a copy of
# libtorch_cpu renamed in TMPDIR, is not the runtime.
TRUSTED_ROOTS = tuple(sorted({p.rstrip("/") + "/" for p in (sys.base_prefix, sys.prefix, sys.exec_prefix,
                                                              "/usr", "/lib", "/lib64", "/lib32") if p}))


@dataclass(frozen=True)
class Mapping:
    """One executable mapping of /proc/<pid>/maps."""

    start: int
    end: int
    offset: int
    path: str  # "" for anonymous memory


def parse_maps(text: str) -> list[Mapping]:
    """The executable mappings of a maps file, sorted by address (pure: the parser of /proc/<pid>/maps)."""
    found = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or "x" not in parts[1]:
            continue
        low, _, high = parts[0].partition("-")
        try:
            found.append(Mapping(int(low, 16), int(high, 16), int(parts[2], 16), parts[5] if len(parts) > 5 else ""))
        except ValueError:
            continue
    return sorted(found, key=lambda m: m.start)


def read_maps(pid: int) -> list[Mapping]:
    try:
        return parse_maps(Path(f"/proc/{pid}/maps").read_text(errors="replace"))
    except OSError:
        return []


def classify(path: str, own: tuple[str, ...]) -> str:
    """The kind of the object a mapping's path names (see the module docstring)."""
    if path in (KERNEL, VDSO, "[vsyscall]", TOOLCHAIN, PROFILER):
        return SYSTEM
    if path in (UNMAPPED, UNSAMPLED):
        return UNKNOWN
    if path in ("", ANON_EXEC) or path.startswith("[anon") or path in ("[heap]", "[stack]"):
        return JIT
    path = path.removesuffix(" (deleted)")
    name = path.rsplit("/", 1)[-1]
    if BUILTIN_LIBRARY.match(name):
        return BUILTIN
    if any(path.startswith(p.rstrip("/") + "/") for p in own if p):
        return OWN
    if sys.executable and path in (sys.executable, str(Path(sys.executable).resolve())):
        return RUNTIME
    if not path.startswith(TRUSTED_ROOTS):
        return BUILTIN
    if OPENMP_LIBRARY.match(name) or DEVICE_DRIVER_LIBRARY.match(name) or COMPILER_LIBRARY.match(name):
        return SYSTEM
    if RUNTIME_LIBRARY.match(name) or path.startswith(RUNTIME_DIRS):
        return RUNTIME
    return BUILTIN


@dataclass
class RawSamples:
    """The samples kept for a verdict, before attribution: (pid, ip, kernel mode) -> count, and the books.

    The pid is the process's (in the judge's pid namespace), so each sample is attributed with the maps of the
    process it came from: the worker under a sandbox launcher that forks it is sampled through the launcher."""

    ips: Counter[tuple[int, int, bool]] = field(default_factory=Counter)
    tids: set[int] = field(default_factory=set)
    lost: int = 0
    windows: int = 0  # the timed calls' windows the samples were kept from (0: the whole exchange)
    cpu_ns: int = 0  # CPU time of the worker's threads in the windows (0: not counted)
    period_ns: int = 0  # CPU time per sample, measured on the threads present when the windows began
    unsampled_ns: int = 0  # CPU of threads born in the windows beyond what their samples stand for
    accounting: str = ""  # why the CPU was not counted, where it was not
    dropped: int = 0  # samples outside the windows, or taken twice (an inherited copy beside the judge's own)

    @property
    def total(self) -> int:
        return sum(self.ips.values())

    @property
    def pids(self) -> set[int]:
        return {pid for pid, _ip, _kernel in self.ips}


@dataclass
class ObjectSamples:
    """The samples that landed in one mapped object, by file offset (for naming symbols later)."""

    kind: str
    samples: int = 0
    offsets: Counter[int] = field(default_factory=Counter)
    symbol_path: str | None = None  # where the judge can open the file, if it can


@dataclass
class CallProfile:
    """One call's (or several merged calls') samples by object; ``shares`` are fractions of all samples.

    ``period_ns`` is the CPU time one sample stands for (measured, the periods being random); the books
    (``cpu_ns``, ``unsampled_ns``) are those of the kernel's counters, 0 where they were not kept."""

    objects: dict[str, ObjectSamples] = field(default_factory=dict)
    lost: int = 0
    threads: int = 0
    period_ns: int = 0
    calls: int = 1  # operator calls the samples cover (a timing batch: its timed calls)
    error: str = ""  # the sampler failed during the window: no verdict
    cpu_ns: int = 0  # CPU time of the worker's threads the samples were taken from
    unsampled_ns: int = 0  # of it, on threads born inside the calls and not accounted for by their samples
    accounting: str = ""  # why the CPU was not counted, where it was not

    @property
    def samples(self) -> int:
        return sum(o.samples for o in self.objects.values())

    @classmethod
    def empty(cls) -> CallProfile:
        """The neutral start of a merge (no calls, no samples)."""
        return cls(calls=0)

    def count(self, kind: str) -> int:
        return sum(o.samples for o in self.objects.values() if o.kind == kind)

    @property
    def shares(self) -> dict[str, float]:
        """Each kind's fraction of all samples."""
        total = self.samples
        return {k: (self.count(k) / total if total else 0.0) for k in KINDS}

    @property
    def work_samples(self) -> int:
        """Samples where computing can happen (all but ``system``): the denominator that judges."""
        return sum(self.count(k) for k in WORK_KINDS)

    @property
    def foreign_samples(self) -> int:
        return sum(self.count(k) for k in FOREIGN_KINDS)

    @property
    def foreign_share(self) -> float:
        """Builtin, JIT and unmapped code as a fraction of the work samples."""
        work = self.work_samples
        return sum(self.count(k) for k in FOREIGN_KINDS) / work if work else 0.0

    def merge(self, other: CallProfile) -> CallProfile:
        """This profile and ``other`` as one (a case's calls judged together)."""
        samples = self.samples + other.samples
        period = (round((self.period_ns * self.samples + other.period_ns * other.samples) / samples)
                  if samples and self.period_ns and other.period_ns else self.period_ns or other.period_ns)
        merged = CallProfile(lost=self.lost + other.lost, threads=max(self.threads, other.threads),
                             period_ns=period, calls=self.calls + other.calls, error=self.error or other.error,
                             cpu_ns=self.cpu_ns + other.cpu_ns, unsampled_ns=self.unsampled_ns + other.unsampled_ns,
                             accounting=self.accounting or other.accounting)
        for source in (self, other):
            for name, obj in source.objects.items():
                into = merged.objects.setdefault(name, ObjectSamples(obj.kind, symbol_path=obj.symbol_path))
                into.samples += obj.samples
                into.offsets.update(obj.offsets)
        return merged

    def top(self, n: int = 5, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, ObjectSamples]]:
        ranked = sorted(((k, o) for k, o in self.objects.items() if o.kind in kinds), key=lambda kv: -kv[1].samples)
        return ranked[:n]

    def symbols(self, name: str, n: int = 3) -> list[tuple[str, int]]:
        """The ``n`` functions of object ``name`` with most samples (empty when the file cannot be read)."""
        obj = self.objects.get(name)
        if obj is None or obj.symbol_path is None:
            return []
        table = symbol_table(obj.symbol_path)
        if table is None:
            return []
        by_name: Counter[str] = Counter()
        for offset, count in obj.offsets.items():
            by_name[table.name(offset) or "?"] += count
        return by_name.most_common(n)


def _symbol_path(path: str, pid: int | None) -> str | None:
    """Where the judge can open a file the worker mapped: the same path (the sandbox binds the system at the
    same paths, and it outlives the worker), else through the worker's root while the worker lives."""
    if not path.startswith("/"):
        return None
    path = path.removesuffix(" (deleted)")
    for candidate in (path,) + ((f"/proc/{pid}/root{path}",) if pid else ()):
        if Path(candidate).is_file():
            return candidate
    return None


def attribute(raw: RawSamples, maps: dict[int, list[Mapping]], own: tuple[str, ...], *, period_ns: int = 0,
              calls: int = 1, toolchain_except: int | None = None) -> CallProfile:
    """Fold raw samples into a profile by the object mapped at each address of the process it came from.
    ``toolchain_except``: the worker's pid when it may start no process; its children's samples are then
    ``[toolchain]`` (a compiler that has often exited by now, its maps gone: seen as "[unmapped]")."""
    starts = {pid: [m.start for m in found] for pid, found in maps.items()}
    profile = CallProfile(lost=raw.lost, threads=len(raw.tids), period_ns=period_ns, calls=calls)
    for (pid, ip, kernel), count in raw.ips.items():
        offset = 0
        if toolchain_except is not None and pid != toolchain_except:
            name = TOOLCHAIN
        elif kernel:
            name = KERNEL
        else:
            found = maps.get(pid, [])
            i = bisect.bisect_right(starts.get(pid, []), ip) - 1
            mapping = found[i] if i >= 0 and ip < found[i].end else None
            if mapping is None:
                name = UNMAPPED
            elif not mapping.path or mapping.path.startswith("[anon"):
                name = ANON_EXEC
            else:
                name, offset = mapping.path, ip - mapping.start + mapping.offset
        obj = profile.objects.get(name)
        if obj is None:
            obj = profile.objects[name] = ObjectSamples(classify(name, own), symbol_path=_symbol_path(name, pid))
        obj.samples += count
        if offset:
            obj.offsets[offset] += count
    split_profiler(profile)
    return profile


def split_profiler(profile: CallProfile) -> None:
    """Move the samples of torch's profiler out of the builtin libraries into ``[profiler]`` (system), by the
    symbol at each sampled offset; where a library's symbols cannot be read, its samples stay builtin."""
    moved = 0
    for obj in profile.objects.values():
        if obj.kind != BUILTIN or obj.symbol_path is None or not obj.offsets:
            continue
        table = symbol_table(obj.symbol_path)
        if table is None:
            continue
        for offset, count in list(obj.offsets.items()):
            name = table.name(offset)
            if name is not None and PROFILER_SYMBOL.search(name):
                del obj.offsets[offset]
                obj.samples -= count
                moved += count
    if moved:
        profile.objects.setdefault(PROFILER, ObjectSamples(SYSTEM)).samples += moved
