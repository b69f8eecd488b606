"""The guard's own profiler session, through C entry points captured before the submission is imported, and the
rule that reads its trace.

Nothing here is looked up again after the capture: not ``torch.autograd.profiler.profile`` (Python a submission
can patch: its result parsing, ``EventList``, ``FunctionEvent``), not a module attribute. The session is started
and stopped with torch's C functions, the trace is read with ``_KinetoEvent``'s own methods as they were, and a
rebound name changes nothing here (the guard's identity checks report it as tampering).

Every call proves the recorder alive: inside the call's marker, after the candidate returns, the guard runs a
canary op of its own (a captured in-place ATen method on a one-element tensor made beforehand, a few
microseconds: it lies inside the timed call; an allowed op, ``fill_``, since in block mode every forbidden op
refuses to run, :mod:`forbid`), so the last op the marker's thread records in the marker must be the canary. A
trace without it means op recording was switched off (``_enable_record_function(False)``, a cleared callback) or
the trace was altered: the call's op list cannot be trusted, and the call fails as tampered. (A submission whose
own last op is ``fill_`` and that leaves recording off gains what switching it back on before returning gives:
nothing the dispatcher lets through in block mode.)
The Python switches that turn recording off are replaced before the import by refusals (:func:`seal`), and
``redispatch_boxed`` (``OpOverload.redispatch``), which skips RecordFunction, leaves an annotation naming the op
it redispatched (:func:`watch_redispatch`). Compiled code can still do both below Python: that is for evidence
from outside the process (the judge's sampler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MARK = "cannbench::candidate_call"
REDISPATCH = "cannbench::redispatch "  # + the op's name: an annotation read as that op
CANARY_OP = "aten::fill_"  # recognised by its place (the marker thread's last op in the marker), not its name
# Python entry points that switch op recording or collection off for a while, or drop the profiler's callbacks
SWITCHES = ("_enable_record_function", "_clear_callbacks", "_set_empty_test_observer", "_toggle_collection_dynamic")

Event = tuple[str, int, int, bool, int]  # name, start ns, end ns, is_user_annotation, thread


@dataclass(frozen=True)
class Trace:
    marks: int  # our call markers in the trace
    canaries: int  # markers holding a recorded canary op
    ops: list[str]  # distinct ops inside any marker that the rule does not allow


def read_trace(events: list[Event], allowed: Callable[[str], bool]) -> Trace:
    """The markers, the canaries and the disallowed ops inside the markers (any thread, any depth). Annotations
    other than ours are the submission's own labels. A marker's canary is the last op its own thread recorded
    inside it, if that op is :data:`CANARY_OP`: nothing of the submission runs after it there."""
    marks = [(s, e, t) for n, s, e, a, t in events if n == MARK and a]
    ops = [(i, ev) for i, ev in enumerate(events) if not ev[3]]
    canaries: set[int] = set()
    for lo, hi, thread in marks:
        inside = [(ev[1], i, ev[0]) for i, ev in ops if ev[4] == thread and lo <= ev[1] and ev[2] <= hi]
        if inside:
            _start, index, name = max(inside)
            if name == CANARY_OP:
                canaries.add(index)
    found: set[str] = set()
    redispatched = [(i, (n[len(REDISPATCH):], s, e, a, t)) for i, (n, s, e, a, t) in enumerate(events)
                    if a and n.startswith(REDISPATCH)]
    for i, (name, start, end, _annotation, _thread) in ops + redispatched:
        if i in canaries:
            continue
        if any(lo <= start and end <= hi for lo, hi, _ in marks) and not allowed(name):
            found.add(name)
    return Trace(len(marks), len(canaries), sorted(found))


@dataclass(frozen=True)
class Recorder:
    """Captured entry points; call :func:`capture` before the submission is imported."""

    prepare: Callable[..., Any]
    enable: Callable[..., Any]
    disable: Callable[[], Any]
    config: Any
    activities: Any
    enter: Callable[..., Any]
    exit: Callable[[Any], None]
    events: Callable[[Any], Any]
    accessors: tuple[Callable[[Any], Any], ...]  # name, start_ns, end_ns, is_user_annotation, start_thread_id
    canary: Callable[[Any, float], Any]
    canary_input: Any

    def start(self) -> None:
        self.prepare(self.config, self.activities)
        self.enable(self.config, self.activities)

    def stop(self) -> list[Event]:
        result = self.disable()
        name, start, end, annotation, thread = self.accessors
        return [(str(name(e)), int(start(e)), int(end(e)), bool(annotation(e)), int(thread(e)))
                for e in self.events(result)]

    def marked(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """``fn(**kwargs)`` inside our marker, the canary after it (also when it raises)."""
        handle = self.enter(MARK, [])
        try:
            return fn(**kwargs)
        finally:
            self.canary(self.canary_input, 0.0)
            self.exit(handle)


def capture(all_threads: bool) -> Recorder:
    """The entry points as they are now: torch's C profiler API, the event accessors, the canary op."""
    import torch
    from torch._C import _autograd, _profiler

    experimental = _profiler._ExperimentalConfig(profile_all_threads=True) if all_threads else \
        _profiler._ExperimentalConfig()
    config = _profiler.ProfilerConfig(_profiler.ProfilerState.KINETO, False, False, False, False, False,
                                      experimental, "")
    event = _autograd._KinetoEvent
    return Recorder(prepare=_autograd._prepare_profiler, enable=_autograd._enable_profiler,
                    disable=_autograd._disable_profiler, config=config,
                    activities={_profiler.ProfilerActivity.CPU},
                    enter=_autograd._record_function_with_args_enter,
                    exit=_autograd._record_function_with_args_exit, events=_autograd._ProfilerResult.events,
                    accessors=(event.name, event.start_ns, event.end_ns, event.is_user_annotation,
                               event.start_thread_id),
                    canary=torch.Tensor.fill_, canary_input=torch.ones(1))


def seal(report: Callable[[str], None]) -> list[tuple[Any, str]]:
    """Replace the switches (:data:`SWITCHES`) in ``torch._C._autograd`` and ``torch.autograd`` by refusals
    that report the attempt; returns ``(owner, name)`` of what was replaced, for the identity checks."""
    import torch
    from torch._C import _autograd

    sealed = []
    for owner in (_autograd, torch.autograd):
        for name in SWITCHES:
            if getattr(owner, name, None) is None:
                continue

            def refuse(*_args: Any, _name: str = name, **_kwargs: Any) -> None:
                report(f"tried to switch the profiler's op recording ({_name})")
                raise PermissionError(f"pytest-cannbench: a submission may not call {_name}")

            setattr(owner, name, refuse)
            sealed.append((owner, name))
    return sealed


def watch_redispatch(rec: Recorder) -> list[tuple[Any, str]]:
    """Wrap ``_DispatchOperatorHandle.redispatch_boxed`` so that every redispatch from Python leaves an
    annotation naming its op (redispatch skips RecordFunction: the op itself is never recorded). Returns
    ``(owner, name)`` of what was wrapped, for the identity checks."""
    import torch

    handle = torch._C._DispatchOperatorHandle
    original, schema, enter, leave = handle.redispatch_boxed, handle.schema, rec.enter, rec.exit

    def redispatch_boxed(self: Any, *args: Any, **kwargs: Any) -> Any:
        mark = enter(REDISPATCH + str(schema(self).name), [])
        try:
            return original(self, *args, **kwargs)
        finally:
            leave(mark)

    handle.redispatch_boxed = redispatch_boxed  # type: ignore[method-assign]  # a pybind class: replaceable
    return [(handle, "redispatch_boxed")]
