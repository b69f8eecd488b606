"""The worker side of the anti-cheat guard: what the submission runs, loads and touches, seen from inside.

Set up before the submission is imported, it watches four things and reports each finding as a
:class:`Problem` with the reply of the request it happened in:

* **builtin compute made unreachable** (``builtin_compute``, block mode, CANN submissions): before the import,
  every op the rule forbids gets a refusing kernel at the dispatcher (:mod:`forbid`,
  :meth:`Guard.close_builtin_kernels`): whatever path reaches it, it does not run, and the attempt is a finding
  naming the op. What follows stays as the evidence in ``warn`` mode and for ops registered later.
* **builtin compute** (``builtin_compute``): every candidate call runs under the profiler, inside a marker
  of our own. Every op recorded inside a marker, on any thread and at any depth (so also the ATen calls a
  custom op's C++ kernel makes through the dispatcher), must be the submission's own (``cann_bench::*`` or a
  namespace that appeared while it was imported) or an allocation, view or copy (:mod:`builtin_ops`). The
  profiler records in C++ below any Python mode, so ``torch.*``, ``F.*``, Tensor methods, ``@`` and
  ``torch.ops.aten.*`` all show up. The session is the guard's own (:mod:`recorder`: captured C entry points,
  a canary op per call whose absence is tampering).
* **a blinded profiler** (``guard_blinded``): the marker must be there exactly once per call and the profiler
  still on when the call returns; a submission that switches it off is caught by its absence.
* **host libraries** (``host_library``): numpy, scipy, Inductor/Dynamo and friends are blocked from import;
  ctypes loading and calls are refused outside the submission's own directory; any shared object mapped
  after the submission's import that is not its own is reported (``/proc/self/maps``).
* **tampering** (``api_tampered``): timing, profiler and worker functions captured before the import are
  compared by identity (and code object) after every request.
* **access** (``forbidden_access``, always blocked): reading the task tree, the reports or the judge's cache,
  starting processes, opening network sockets, signalling other processes.

Python-level hooks can be raced by a submission that rewrites this process's memory; the judge's own checks
(outputs, inputs, /proc, wall clock) and the process boundary do not depend on them. docs/security.md
says what is and is not defended.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from pytest_cannbench.guard import builtin_ops, coverage, forbid, recorder
from pytest_cannbench.guard.maps import executable_files, library_problems
from pytest_cannbench.guard.policy import BLOCK, KERNEL, OFF
from pytest_cannbench.outcome import (
    API_TAMPERED,
    BUILTIN_COMPUTE,
    FORBIDDEN_ACCESS,
    GUARD_BLINDED,
    HOST_LIBRARY,
    NO_CUSTOM_KERNEL,
)
from pytest_cannbench.vocab.registry import DeviceKind, is_kind

MARK = recorder.MARK

# Compute that would run outside the profiler's view. numpy is hidden before torch is imported (torch works
# without it); the others are refused when imported.
BLOCKED_MODULES = ("numpy", "scipy", "numba", "jax", "jaxlib", "tensorflow", "cupy", "torch._dynamo",
                   "torch._inductor", "torch.compiler", "functorch.compile", "tvm", "mlx", "pandas", "sklearn")
CTYPES_EVENTS = frozenset({"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
                           "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                           "ctypes.addressof"})
PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                            "subprocess.Popen", "pty.spawn", "os.startfile"})
NETWORK_EVENTS = frozenset({"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})
NETWORK_FAMILIES = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET (AF_UNIX stays: local)
PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.remove", "os.rmdir", "os.rename", "os.truncate",
                         "os.chmod", "os.chown", "os.utime", "os.link", "os.symlink", "os.mkdir", "shutil.rmtree",
                         "shutil.copyfile", "shutil.move", "os.chdir"})
SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
WATCHED = CTYPES_EVENTS | PROCESS_EVENTS | NETWORK_EVENTS | PATH_EVENTS | SIGNAL_EVENTS | {"import"}


@dataclass(frozen=True)
class Problem:
    kind: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def hide_host_modules() -> None:
    """Before ``import torch``: make ``import numpy`` (and the rest) fail for everyone in this process."""
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    for name in BLOCKED_MODULES:
        if "." not in name:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def builtin_ops_inside(events: list[tuple[str, int, int, bool]]) -> tuple[int, list[str]]:
    """``(marks, ops)``: how many of our markers the trace holds, and the distinct op names recorded inside any
    marker's time window (any thread) that are neither the submission's nor allowed. ``events`` are
    ``(name, start, end, is_annotation)``; annotations other than ours are the submission's own labels."""
    trace = recorder.read_trace([(n, s, e, a, 0) for n, s, e, a in events], builtin_ops.is_allowed)
    return trace.marks, trace.ops


def calls_without_kernel(events: list[tuple[Any, ...]]) -> int:
    """How many of our markers hold no call of the submission's own kernels: a label of a prebuilt JIT
    extension's function (:data:`builtin_ops.CUSTOM_PREFIX`) or one of its own ops (``builtin_ops.own_op``)."""
    spans = [(str(e[0]), int(e[1]), int(e[2]), bool(e[3])) for e in events]  # (name, start, end, annotation, ...)
    windows = [(start, end) for name, start, end, _ in spans if name == MARK]
    own = [(start, end) for name, start, end, annotation in spans
           if (name.startswith(builtin_ops.CUSTOM_PREFIX) if annotation else builtin_ops.own_op(name))]
    return sum(1 for lo, hi in windows if not any(lo <= s and e <= hi for s, e in own))


def _all_threads() -> bool:
    """Whether the profiler can record ops on every thread, not only the caller's (a submission may compute on
    a helper thread and join it before returning). torch before 2.5 lacks the option: then only the calling
    thread is watched, and helper threads are left to the /proc thread count."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        _ExperimentalConfig(profile_all_threads=True)
        return True
    except (ImportError, TypeError):
        return False


def _mapped_libraries() -> set[str]:
    """Executable file mappings, whatever the file's name (a ``*.bin`` loaded as a library counts)."""
    try:
        with open("/proc/self/maps") as fh:
            return set(executable_files(fh.read()))
    except OSError:
        return set()


def _attribute(owner: Any, name: str) -> Any:
    """A class's own attribute as stored (a function, not a bound method), or a module's attribute."""
    return owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


class Guard:
    """One per candidate worker in submission mode."""

    def __init__(self, mode: str, device: str, site_dir: str, protected: list[str],
                 watched: Sequence[tuple[Any, tuple[str, ...]]] = ()) -> None:
        """``watched``: the worker's own functions the submission could replace to cheat (its timers, its
        tensor wire), by owner; their identities are compared after every request like the guard's own."""
        import torch

        self.mode = mode
        self.device = device
        self.site = os.path.realpath(site_dir) if site_dir else ""
        self.protected = tuple(os.path.realpath(p) for p in protected if p)
        # Inside these nothing is refused, even under a protected root (a tree given as ".", say): its own
        # install, its cwd and TMPDIR, this package, the interpreter and torch.
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.allowed = tuple(os.path.realpath(p) for p in (
            site_dir, os.getcwd(), os.environ.get("TMPDIR", ""), package,
            sys.prefix, sys.base_prefix, os.path.dirname(os.path.abspath(torch.__file__))) if p)
        self.pid = os.getpid()
        self.problems: list[Problem] = []
        # Everything the guard calls from here on is captured now, before the submission exists: its own
        # methods and helpers, torch's profiler entry points. A rebound name changes nothing here and is
        # reported by the identity checks.
        for name in ("call", "batch", "report", "check", "_found", "_refused", "_audit", "_classify", "_path_problem"):
            setattr(self, name, getattr(Guard, name).__get__(self))
        self._all_threads = _all_threads()
        self._recorder = recorder.capture(self._all_threads)
        self._read_trace, self._own_namespaces, self._is_allowed = (recorder.read_trace, builtin_ops.own_namespaces,
                                                                     builtin_ops.is_allowed)
        self._op_time, self._kernel_time = coverage.op_time, [0, 0, 0]  # own ns, builtin ns, calls (kernel mode)
        self._op_names = torch._C._dispatch_get_all_op_names
        self._ops_before = frozenset(self._op_names())
        self._mapped, self._under, self._attribute = _mapped_libraries, _under, _attribute
        self._imports_problems = library_problems
        self._own_dirs: tuple[str, ...] = ()
        self._enabled = torch.autograd._profiler_enabled
        self._realpath = os.path.realpath
        if mode != OFF:  # the profiler starts a thread and maps libraries the first time: not the submission's
            self._recorder.start()
            self._recorder.marked(lambda: torch.ones(8).add_(1), {})
            self._recorder.stop()
            self._sealed = recorder.seal(lambda detail: self._found(API_TAMPERED, detail))
            self._sealed += recorder.watch_redispatch(self._recorder)
        self.closed: forbid.Closed | None = None
        self._watched = tuple(watched)
        self._identities = list(self._capture())
        self._libraries = _mapped_libraries()

    # ------------------------------------------------------------ identities

    def _capture(self) -> Iterator[tuple[Any, str, Any, Any]]:
        import time

        import torch

        main = sys.modules.get("__main__")
        owners: list[tuple[Any, tuple[str, ...]]] = [
            (time, ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                    "process_time", "thread_time")),
            (torch.autograd, ("_profiler_enabled",)),
            (torch.autograd.profiler, ("profile", "record_function")),
            (torch.profiler, ("profile", "record_function", "schedule")),
            *self._watched,
            (Guard, ("call", "batch", "report", "_audit", "check", "_found", "_refused", "_classify",
                     "_path_problem", "_capture", "__init__", "close_builtin_kernels")),
            (forbid, ("close", "forbidden", "keys_for", "finding", "refusal_message", "Refusal")),
            (forbid.Refusal, ("__call__", "__init__")),
            (sys.modules[__name__], ("builtin_ops_inside", "_mapped_libraries", "_attribute", "_under", "Guard",
                                     "library_problems")),
            (builtin_ops, ("is_allowed", "own_namespaces", "base_name", "ALLOWED", "LIBRARY_NAMESPACES",
                           "SUBMISSION_NAMESPACE")),
            (recorder, ("read_trace", "capture", "seal", "Recorder", "MARK", "CANARY_OP", "REDISPATCH",
                          "watch_redispatch")),
            (recorder.Recorder, ("start", "stop", "marked")),
            (coverage, ("op_time", "_canaries", "_union", "_intersect", "_length", "device_time", "records_of",
                        "own_launcher", "TraceRecord")),
            (torch._C._autograd, ("_enable_profiler", "_disable_profiler", "_prepare_profiler",
                                  "_record_function_with_args_enter", "_record_function_with_args_exit",
                                  *recorder.SWITCHES)),
            (torch.autograd, recorder.SWITCHES),
            (torch._C._autograd._KinetoEvent, ("name", "start_ns", "end_ns", "is_user_annotation",
                                               "start_thread_id")),
            (torch._C._autograd._ProfilerResult, ("events",)),
            (torch.Tensor, ("fill_",)),
            (torch._C._DispatchOperatorHandle, ("redispatch_boxed", "schema")),
        ]
        if main is not None and hasattr(main, "Worker"):
            owners += [(main, ("_clock", "_device_coverage")),
                       (main.Worker, ("call", "time", "hello", "discover", "resolve"))]
        if is_kind(self.device, DeviceKind.CUDA):
            owners += [(torch.cuda, ("synchronize", "Event")), (torch.cuda.Event, ("record", "elapsed_time",
                                                                                   "synchronize"))]
            # --cann-cuda-graph: the graph API the graph timer replays through
            owners += [(torch.cuda, ("CUDAGraph", "graph")), (torch.cuda.CUDAGraph, ("replay", "reset"))]
        npu = getattr(torch, "npu", None)
        if is_kind(self.device, DeviceKind.NPU) and npu is not None:
            owners += [(npu, ("synchronize", "Event")), (npu.Event, ("record", "elapsed_time"))]
            torch_npu = sys.modules.get("torch_npu")
            prof = getattr(torch_npu, "profiler", None)
            if prof is not None:
                owners.append((prof, ("profile", "schedule", "tensorboard_trace_handler", "_ExperimentalConfig")))
        for owner, names in owners:
            for name in names:
                obj = _attribute(owner, name)
                if obj is None:
                    continue
                func = getattr(obj, "__func__", obj)
                yield owner, name, obj, getattr(func, "__code__", None)

    def check(self) -> None:
        """Identity checks, new shared objects: run after the submission's import and after every request."""
        for owner, name, obj, code in self._identities:
            now = self._attribute(owner, name)
            func = getattr(now, "__func__", now)
            if now is not obj or getattr(func, "__code__", None) is not code:
                label = getattr(owner, "__name__", type(owner).__name__)
                self._found(API_TAMPERED, f"{label}.{name} was replaced or rewritten")
        libraries = self._mapped()
        for path in sorted(libraries - self._libraries):
            real = self._realpath(path)
            if self.site and self._under(real, (self.site,)):
                continue
            if self._own_dirs and self._under(real, self._own_dirs):
                for detail in self._imports_problems(real):  # built at run time: the wheel's scan never saw it
                    self._found(BUILTIN_COMPUTE, detail)
                continue
            self._found(HOST_LIBRARY, f"loaded the shared object {path}")
        self._libraries = libraries

    def own_dir(self, path: str) -> None:
        """Shared objects built into ``path`` while the submission runs (its private Triton cache) are its own,
        once their imports pass the same symbol checks as the wheel's libraries."""
        self._own_dirs = (*self._own_dirs, os.path.realpath(path))

    def report(self) -> list[dict[str, Any]]:
        """The problems found since the last report (each reported once)."""
        self.check()
        found, self.problems = self.problems, []
        unique = list(dict.fromkeys(found))
        reported: list[dict[str, Any]] = [p.to_dict() for p in unique[:20]]
        own_ns, builtin_ns, calls = self._kernel_time
        if calls:  # kernel mode: where the calls' op time went (guard.coverage), beside the findings
            reported.append({"kind": coverage.TIME_RECORD, "own_ns": own_ns, "builtin_ns": builtin_ns, "calls": calls})
            self._kernel_time = [0, 0, 0]
        return reported

    def _found(self, kind: str, detail: str) -> None:
        self.problems.append(Problem(kind, detail[:300]))

    # ------------------------------------------------------------ builtin kernels closed

    def close_builtin_kernels(self) -> forbid.Closed:
        """Block mode, CANN submissions, before the import: every op the rule forbids refuses to run from now on,
        whatever path reaches it (:mod:`forbid`); each attempt is a ``builtin_compute`` finding."""
        self.closed = forbid.close(self.device, self._refused)
        return self.closed

    def _refused(self, op: str) -> None:
        """A refusing kernel ran (any thread, the GIL held): one finding per op until the next report, however
        often a loop that catches the error tries again."""
        problem = Problem(BUILTIN_COMPUTE, forbid.finding(op)[:300])
        if problem not in self.problems:
            self.problems.append(problem)

    # ------------------------------------------------------------ the op tree

    def call(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """One candidate call under the profiler, inside our marker."""
        if self.mode == OFF:
            return fn(**kwargs)
        with self.batch() as wrap:
            result = wrap(fn)(**kwargs)
        return result

    @contextmanager
    def batch(self) -> Iterator[Callable[[Callable[..., Any]], Callable[..., Any]]]:
        """A profiler session for a series of calls; ``wrap(fn)`` marks each call of fn inside it."""
        if self.mode == OFF:
            yield lambda fn: fn
            return
        rec, enabled = self._recorder, self._enabled
        check_enabled = not self._all_threads  # that flag is per thread: all-thread sessions leave it off
        calls = [0]
        blinded: list[str] = []

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            def marked(**kwargs: Any) -> Any:
                calls[0] += 1
                result = rec.marked(fn, kwargs)
                if check_enabled and not enabled():
                    blinded.append("the profiler was switched off during the call")
                return result
            return marked

        rec.start()
        try:
            yield wrap
        finally:
            try:
                events = rec.stop()
                own = self._own_namespaces(self._ops_before, frozenset(self._op_names()))
                is_allowed = self._is_allowed
                trace = self._read_trace(events, lambda op: is_allowed(op, own))
                marks, canaries, ops = trace.marks, trace.canaries, trace.ops
                bare = calls_without_kernel(events) if self.mode == KERNEL else 0
                if self.mode == KERNEL:
                    own_ns, builtin_ns = self._op_time(events, lambda op: is_allowed(op, own))
                    self._kernel_time = [self._kernel_time[0] + own_ns, self._kernel_time[1] + builtin_ns,
                                         self._kernel_time[2] + calls[0]]
            except Exception as exc:  # noqa: BLE001 - a profiler the submission broke
                blinded.append(f"the profiler could not be read back ({type(exc).__name__}: {exc})")
                marks, canaries, ops, bare = calls[0], calls[0], [], 0
            if marks != calls[0]:
                blinded.append(f"{calls[0]} call(s) but {marks} marker(s) in the profiler's trace")
            for message in dict.fromkeys(blinded):
                self._found(GUARD_BLINDED, message)
            if canaries < marks:
                self._found(API_TAMPERED, f"the profiler missed the judge's canary op in {marks - canaries} of "
                                          f"{marks} call(s): op recording was switched off or the trace altered")
            if ops:
                self._found(BUILTIN_COMPUTE, "ran builtin op(s) " + ", ".join(ops[:12]))
            if bare:
                self._found(NO_CUSTOM_KERNEL, f"{bare} of {marks} call(s) ran none of the submission's own compiled "
                            "kernels (KernelBench's rule: a custom kernel must do the work in forward)")

    # ------------------------------------------------------------ the audit hook

    def install_audit_hook(self) -> None:
        """Last step before the import: hooks cannot be removed, and our own setup must not trip them."""
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in WATCHED:
            return
        problem = self._classify(event, args)
        if problem is None:
            return
        self.problems.append(problem)
        if problem.kind == FORBIDDEN_ACCESS or self.mode in (BLOCK, KERNEL):
            raise PermissionError(f"pytest-cannbench: a submission may not do this ({problem.detail})")

    def _classify(self, event: str, args: tuple[Any, ...]) -> Problem | None:
        if event == "import":
            name = str(args[0]) if args else ""
            if self.mode != OFF and any(name == m or name.startswith(m + ".") for m in BLOCKED_MODULES):
                return Problem(HOST_LIBRARY, f"imported {name}")
            return None
        if event in CTYPES_EVENTS:
            if self.mode == OFF:
                return None
            path = os.fsdecode(args[0]) if event == "ctypes.dlopen" and args and isinstance(args[0], (str, bytes)) \
                else ""
            if path and self.site and os.sep in path and _under(self._realpath(path), (self.site,)):
                return None  # its own library (torch.ops.load_library)
            return Problem(HOST_LIBRARY, f"used ctypes ({event}{': ' + path[:200] if path else ''})")
        if event in PROCESS_EVENTS:
            return Problem(FORBIDDEN_ACCESS, f"started a process ({event})")
        if event in NETWORK_EVENTS:
            if event == "socket.__new__" and (len(args) < 2 or args[1] not in NETWORK_FAMILIES):
                return None
            return Problem(FORBIDDEN_ACCESS, f"used the network ({event})")
        if event in SIGNAL_EVENTS:
            target = args[0] if args else None
            if event == "signal.pthread_kill" or target in (self.pid, 0):
                return None
            return Problem(FORBIDDEN_ACCESS, f"signalled process {target} ({event})")
        return self._path_problem(event, args)

    def _path_problem(self, event: str, args: tuple[Any, ...]) -> Problem | None:
        paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
        for raw in paths:
            try:
                path = self._realpath(os.fsdecode(raw))
            except (TypeError, ValueError):
                continue
            if self.protected and _under(path, self.protected) and not _under(path, self.allowed):
                return Problem(FORBIDDEN_ACCESS, f"touched {path} ({event})")
            parts = path.split(os.sep)
            if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != self.pid:
                return Problem(FORBIDDEN_ACCESS, f"touched another process's {path} ({event})")
        return None
