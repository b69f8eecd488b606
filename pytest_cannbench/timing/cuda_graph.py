"""CUDA-graph timing (``--cann-cuda-graph auto|on|off``): for launch-bound calls.

A call of a few microseconds of GPU work timed eagerly is mostly the host's launch overhead. Here, in the
candidate worker's CUDA timed loop, the call is captured once in a CUDA graph (``torch.cuda.graph``, which
captures on a side stream) on static input buffers, and the L2 clear in a graph of its own. Every timed call
then copies its own fresh input set into the static buffers (outside the timed region), and CUDA events time
a replay of (clear graph + call graph) and, right after it, a replay of the clear graph alone; the call's
time is the first minus the batch's median of the second. The graph's output for that set is cloned, copied
out and verified like any timed output; then the graph's output buffer is overwritten (NaN), so each replay
must write all of it. A call whose output shares memory with an input is timed eagerly, where the output
contract judges it.

What it guarantees: every timed replay ran on its own input set, which entered the worker only just before
it, and its output was verified against that set's golden; the time covers all GPU work the call enqueued on
any stream joined into the capture. What it does not: the host side of the call (Python, argument parsing,
launch) is not timed at all, which is the point; work the call does on the host, or decisions it takes from
input values, are frozen at capture (a call that reads a value to the host cannot be captured and falls back);
the subtraction assumes the clear costs the same before a call as alone.

When capture fails (the call synchronises, allocates pinned memory, reads a value to the host, uses an
uncapturable library) or the subtracted time of a pre-flight replay on the correctness inputs is not positive,
the batch falls back to the eager timers before any timed set is fetched, with a note. A subtraction that is
not positive for a timed call, or a timed set whose shapes differ from the capture's, makes the batch report
:data:`FALLBACK_TIMER`; the judge then discards that window and times it again eagerly on fresh sets.
Nothing here is reachable on the CPU or an NPU (the judge sends ``off`` there and :func:`wants_graph`
refuses any other device).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

GRAPH_MODES = ("auto", "on", "off")
LAUNCH_BOUND_S = 50e-6  # auto: graphs only when the call's eager median is below this
PROBE_CALLS = 3  # auto: eager calls on the correctness inputs that decide
PREFLIGHT_REPLAYS = 3  # replays on the correctness inputs that check the subtraction before any timed set
GRAPH_TIMER = "cuda_graph"
FALLBACK_TIMER = "cuda_graph_fallback"  # the batch's graph times are unusable: the judge retimes the window


def wants_graph(mode: str, device: str, eager_median_s: float | None) -> bool:
    """Whether to time with graphs: never off CUDA; ``on`` always; ``auto`` when the eager median is known and
    below :data:`LAUNCH_BOUND_S`."""
    if not device.startswith("cuda") or mode not in GRAPH_MODES:
        return False
    if mode == "on":
        return True
    return mode == "auto" and eager_median_s is not None and 0 < eager_median_s < LAUNCH_BOUND_S


def subtract(totals: list[float], clears: list[float]) -> tuple[list[float] | None, str]:
    """Per-call times from (clear + call) replays and clear-only replays: each total less the median clear.
    None, and why, when any result is not positive (the clear's own jitter exceeds the call: not measurable
    this way) or the inputs are empty or unequal."""
    if not totals or len(totals) != len(clears):
        return None, "no replays to subtract"
    clear = statistics.median(clears)
    calls = [t - clear for t in totals]
    bad = [i for i, c in enumerate(calls) if not c > 0]
    if bad:
        i = bad[0]
        return None, (f"replay {i + 1}: clear+call {totals[i] * 1e6:.2f} us minus the clear's median "
                      f"{clear * 1e6:.2f} us is not positive")
    return calls, ""


def _clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _aliases(out: Any, inputs: Any) -> bool:
    """Whether an output shares storage with an input (the eager contract fails that; a copy would hide it)."""
    held = {t.untyped_storage().data_ptr() for t in _tensors(inputs)}
    return any(t.untyped_storage().data_ptr() in held for t in _tensors(out))


def _poison(out: Any) -> None:
    """Overwrite the graph's output once copied out, so each replay must write all of it again."""
    import torch

    for t in _tensors(out):
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype != torch.bool:
            t.fill_(77)


def _copy_into(static: Any, fresh: Any) -> bool:
    """Copy a fresh set into the static capture buffers; False when its structure, shapes or dtypes differ
    (or a non-tensor argument changed: that was frozen at capture)."""
    import torch

    if isinstance(static, torch.Tensor):
        if not isinstance(fresh, torch.Tensor) or static.shape != fresh.shape or static.dtype != fresh.dtype:
            return False
        static.copy_(fresh)
        return True
    if isinstance(static, dict):
        return static.keys() == fresh.keys() and all(_copy_into(static[k], fresh[k]) for k in static)
    if isinstance(static, (list, tuple)):
        return (isinstance(fresh, (list, tuple)) and len(static) == len(fresh)
                and all(_copy_into(s, f) for s, f in zip(static, fresh)))
    return bool(static == fresh)


class _Graphs:
    """The call captured on static buffers, the clear captured alone, and a timed replay of both."""

    def __init__(self, fn: Callable[..., Any], kwargs: dict[str, Any], clear: Callable[[], None]) -> None:
        import torch

        self.static = _clone(kwargs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazily made workspaces and handles exist before the capture
            for _ in range(2):
                fn(**self.static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.call = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.call):
            self.out = fn(**self.static)
        self.clear = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.clear):
            clear()
        torch.cuda.synchronize()

    def replay(self) -> tuple[float, float]:
        """Seconds of (clear + call) and of the clear alone, by CUDA events on the current stream."""
        import torch

        marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        torch.cuda.synchronize()
        marks[0].record()
        self.clear.replay()
        self.call.replay()
        marks[1].record()
        self.clear.replay()
        marks[2].record()
        marks[2].synchronize()
        return marks[0].elapsed_time(marks[1]) / 1e3, marks[1].elapsed_time(marks[2]) / 1e3

    def close(self) -> None:
        self.call.reset()
        self.clear.reset()


class _RandomState:
    """The card's default random generator, kept before a capture. A capture that fails part-way leaves the
    generator's state marked as capturing (seen with torch 2.11 on an H200: every later random draw on the card
    raised "Offset increment outside graph capture encountered unexpectedly"); :meth:`restore` gives the generator
    a clean copy of the state it had, so the eager calls that follow, the submission's included, draw as before."""

    def __init__(self) -> None:
        import torch

        self.generator: Any = None
        self.saved: Any = None
        try:
            self.generator = torch.cuda.default_generators[torch.cuda.current_device()]
            self.saved = self.generator.clone_state()
        except Exception:  # noqa: BLE001 - an older torch without graph-safe states, or no CUDA build
            self.generator = None

    def restore(self) -> None:
        if self.generator is not None:
            try:
                self.generator.graphsafe_set_state(self.saved.clone_state())
            except (AttributeError, RuntimeError):
                pass


def _eager_median(fn: Callable[..., Any], kwargs: dict[str, Any], clear: Callable[[], None]) -> float:
    import torch

    times = []
    for _ in range(PROBE_CALLS):
        clear()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn(**kwargs)
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end) / 1e3)
    return statistics.median(times)


def graph_batch(fn: Callable[..., Any], warmup_kwargs: dict[str, Any], fetch: Callable[[int], Any], count: int,
                device: str, mode: str, clear: Callable[[], None] | None, sink: Callable[[int, Any], None],
                notes: list[str]) -> tuple[list[float], str] | None:
    """The batch's per-call seconds and timer, or None (with a note) to time it eagerly instead: then no timed
    set has been fetched yet."""
    import torch

    if not device.startswith("cuda") or mode not in ("auto", "on"):
        return None
    if clear is None:
        notes.append("CUDA graph timing needs the L2 clear; timed eagerly")
        return None
    if mode == "auto":
        median = _eager_median(fn, warmup_kwargs, clear)
        if not wants_graph(mode, device, median):
            notes.append(f"eager median {median * 1e6:.1f} us is not launch-bound (< {LAUNCH_BOUND_S * 1e6:g} us): "
                         "timed eagerly")
            return None
    rng = _RandomState()
    try:
        graphs = _Graphs(fn, warmup_kwargs, clear)
        preflight = [graphs.replay() for _ in range(PREFLIGHT_REPLAYS)]
    except Exception as exc:  # noqa: BLE001 - not capturable: the eager path gets the batch
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        rng.restore()
        notes.append(f"CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:160]}); timed eagerly")
        return None
    if _aliases(graphs.out, graphs.static):
        graphs.close()
        notes.append("the call's output shares memory with an input: timed eagerly, where the contract judges it")
        return None
    calls, why = subtract([t for t, _ in preflight], [c for _, c in preflight])
    if calls is None:
        graphs.close()
        notes.append(f"CUDA graph subtraction implausible on the correctness inputs ({why}); timed eagerly")
        return None
    totals: list[float] = []
    clears: list[float] = []
    for i in range(count):
        kwargs = fetch(i)  # on the device already; copied into the capture's buffers outside the timed region
        if not _copy_into(graphs.static, kwargs):
            notes.append(f"timed set {i + 1} differs in shape or arguments from the capture")
            graphs.close()
            return _eager_rest(fn, kwargs, i, count, fetch, clear, sink, totals), FALLBACK_TIMER
        total, alone = graphs.replay()
        totals.append(total)
        clears.append(alone)
        # a copy per call: the graph returns one buffer, which the output contract would take for an earlier
        # call's output kept and returned again; the buffer is then poisoned, so the next replay must rewrite it
        sink(i, _clone(graphs.out))
        _poison(graphs.out)
    graphs.close()
    seconds, why = subtract(totals, clears)
    if seconds is None:
        notes.append(f"CUDA graph subtraction implausible ({why})")
        return totals, FALLBACK_TIMER  # positive, with the clear: the judge discards the window
    notes.append(f"CUDA graphs: clear median {statistics.median(clears) * 1e6:.2f} us subtracted")
    return seconds, GRAPH_TIMER


def _eager_rest(fn: Callable[..., Any], kwargs: Any, first: int, count: int, fetch: Callable[[int], Any],
                clear: Callable[[], None], sink: Callable[[int, Any], None], seconds: list[float]) -> list[float]:
    """Calls ``first``.. timed eagerly with events (each output still verified); the batch is retimed anyway."""
    import torch

    for i in range(first, count):
        if i != first:
            kwargs = fetch(i)
        clear()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        result = fn(**kwargs)
        torch.cuda.synchronize()
        end.record()
        end.synchronize()
        seconds.append(begin.elapsed_time(end) / 1e3)
        sink(i, result)
    return seconds
