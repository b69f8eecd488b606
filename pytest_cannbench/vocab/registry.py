"""The names the parts of the grader agree on, declared once: accuracy checkers, timers and device kinds.

Each registry maps a name to what the rest of the package needs to know about it without importing the part that
implements it (torch-free, so the option parser, the CLI and the guard read it freely). The implementations key
themselves by these names and tests hold the two sides equal: ``judge.precision`` has one judge function per
checker, ``timing.in_worker`` one timer per device timer. Adding a checker is its entry here and its judge
function; a timer, its entry here and its function in ``timing.in_worker``; a device kind, its member of
:class:`DeviceKind` and the timing code for it (``docs/architecture.md``, "Extending").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any


class Word(str, Enum):
    """A string enum: its members compare equal to, hash like, print as and serialise (JSON) as their values, on
    every Python this package supports (3.10 has no ``enum.StrEnum``). Pickles and xdist's wire take builtins:
    records hand out ``member.value`` there."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


def plain(value: Any) -> Any:
    """``value`` with every enum member (a :class:`Word` anywhere inside dicts, lists and tuples) replaced by its
    value: what a record becomes at a wire that takes builtins only (xdist's execnet refuses a str subclass)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


# ---------------------------------------------------------------------------------------------------- checkers


@dataclass(frozen=True)
class CheckerInfo:
    """An accuracy checker: how floating outputs are compared with the golden (integer and boolean outputs are
    compared exactly by every checker)."""

    name: str
    summary: str  # one line, for --help and the CLI


CHECKERS: Mapping[str, CheckerInfo] = MappingProxyType(
    {
        c.name: c
        for c in (
            CheckerInfo("relative_error", "the CANN precision standard (MERE/MARE per dtype against the fp64 golden)"),
            CheckerInfo("allclose", "|a - g| <= atol + rtol*|g| with per-dtype tolerances (KernelBench's rule)"),
        )
    }
)
DEFAULT_CHECKER = "relative_error"
# older spellings the judge still accepts (never offered as a choice)
CHECKER_ALIASES: Mapping[str, str] = MappingProxyType({"cann_default": "relative_error"})


def checker_names() -> tuple[str, ...]:
    """The choices of ``--cann-checker`` and ``cannbench check --checker``, the default first."""
    return (DEFAULT_CHECKER, *sorted(n for n in CHECKERS if n != DEFAULT_CHECKER))


def resolve_checker(name: str) -> str:
    """The registered checker ``name`` means (an alias resolved); ValueError naming the choices otherwise."""
    found = CHECKER_ALIASES.get(name, name)
    if found not in CHECKERS:
        raise ValueError(f"unknown checker {name!r}; expected one of {', '.join(checker_names())}")
    return found


def checker_help() -> str:
    """The checkers in words, for help texts: each name with its one-line summary."""
    return "; ".join(
        f"{n}{' (default)' if n == DEFAULT_CHECKER else ''}: {CHECKERS[n].summary}" for n in checker_names()
    )


# ---------------------------------------------------------------------------------------------------- devices

AUTO = "auto"


class DeviceKind(Word):
    """A kind of device the candidate runs and is timed on. ``cuda:1`` and ``npu:0`` are devices of a kind
    (:meth:`of`); the kind's properties say what the judge does differently on it."""

    CPU = "cpu"
    CUDA = "cuda"
    NPU = "npu"

    @classmethod
    def of(cls, device: str) -> DeviceKind:
        """The kind of a device string (``cpu``, ``cuda``, ``cuda:1``, ``npu:0``); ValueError otherwise."""
        head = str(device).partition(":")[0]
        try:
            return cls(head)
        except ValueError:
            raise ValueError(
                f"device {device!r}: not a device of a known kind ({', '.join(k.value for k in cls)})"
            ) from None

    @property
    def accelerator(self) -> bool:
        """A card with its own memory and clock: timed by device timers, addressed as ``<kind>:<id>``."""
        return self is not DeviceKind.CPU

    @property
    def visibility_env(self) -> str | None:
        """The variable that limits a process to some cards of this kind (None: the CPU)."""
        return {DeviceKind.CUDA: "CUDA_VISIBLE_DEVICES", DeviceKind.NPU: "ASCEND_RT_VISIBLE_DEVICES"}.get(self)

    def address(self, index: int | str = 0) -> str:
        """How a process addresses one device of this kind (the CPU is one device)."""
        return self.value if self is DeviceKind.CPU else f"{self.value}:{index}"

    @property
    def timers(self) -> tuple[str, ...]:
        """The timers that time calls on this kind (:data:`TIMERS`), the default first."""
        return tuple(t.name for t in TIMERS.values() if t.device is self)


DEVICE_CHOICES = (AUTO, *(k.value for k in DeviceKind))  # --cann-device


def parse_ids(text: str | None) -> list[int]:
    """``--cann-device KIND:IDS``: ``0,3`` -> [0, 3]; ``all`` or nothing -> [] (every device of the host, see
    ``timing.devices.all_ids``), as the official harness spreads its workers over every card."""
    if not text or str(text).strip().lower() == "all":
        return []
    try:
        ids = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--cann-device KIND:{text}: expected 'all' or comma-separated integers such as 0,1") from None
    if not ids or any(i < 0 for i in ids):
        raise ValueError(f"--cann-device KIND:{text}: expected non-negative integers")
    return ids


def is_kind(device: str, kind: DeviceKind) -> bool:
    """Whether a device string is of ``kind`` (``cuda:1`` is CUDA); False for a string of no known kind."""
    return str(device).partition(":")[0] == kind.value


def on_accelerator(device: str) -> bool:
    """Whether a device string names a card (CUDA, NPU); False for the CPU and for a string of no known kind."""
    return any(is_kind(device, kind) for kind in DeviceKind if kind.accelerator)


# ---------------------------------------------------------------------------------------------------- timers


@dataclass(frozen=True)
class TimerInfo:
    """A way of timing the candidate's calls. ``host_clock``: the worker's own monotonic clock around each call,
    so the judge can hold the phases it reports to account exactly (the phases tile the timed loop and the call
    times sum to the calls phase); a device timer's figures come from the card and are checked otherwise."""

    name: str
    device: DeviceKind
    host_clock: bool
    summary: str
    retimed: bool = False  # its window's times are unusable: the judge discards the window and times it again


TIMERS: Mapping[str, TimerInfo] = MappingProxyType(
    {
        t.name: t
        for t in (
            TimerInfo(
                "cpu_clock",
                DeviceKind.CPU,
                True,
                "the worker's monotonic clock, bound before the submission was "
                "imported, around each call between cache flushes",
            ),
            TimerInfo(
                "host_clock",
                DeviceKind.CPU,
                True,
                "the host clock around each call of a device without a timer of its own (a multi-rank case's ranks)",
            ),
            TimerInfo(
                "cuda_profiler",
                DeviceKind.CUDA,
                False,
                "from the call's start to the end of the last kernel the CUDA profiler records on any stream during it",
            ),
            TimerInfo(
                "cuda_events",
                DeviceKind.CUDA,
                False,
                "CUDA events around the call and a full device synchronise (where the profiler is unavailable)",
            ),
            TimerInfo(
                "cuda_graph",
                DeviceKind.CUDA,
                False,
                "replays of the call captured in a CUDA graph, the L2 clear "
                "captured apart and subtracted (cann_cuda_graph)",
            ),
            TimerInfo(
                "cuda_graph_fallback",
                DeviceKind.CUDA,
                False,
                "a graph batch whose times include the L2 clear: never kept",
                retimed=True,
            ),
            TimerInfo("npu_profiler", DeviceKind.NPU, False, "the Ascend profiler's kernel times of each step"),
        )
    }
)
TIMER_AUTO = "auto"  # the device's own choice


def host_clock(timer: str) -> bool:
    """Whether a batch's timer is a host clock whose phases the judge checks exactly. A name no timer has (a
    worker's reply is read, not trusted) gets the strict host-clock checks."""
    info = TIMERS.get(timer)
    return info is None or info.host_clock


# ---------------------------------------------------------------- words of options whose meaning lives in a room

# Declared here, below every room, so the option declarations (options.defaults) accept them without importing the
# rooms that act on them; each room reads its own words from here.
SANDBOX_MODES = ("auto", "bwrap", "off")  # --cann-sandbox (guard.sandbox)
INPUT_DISTS = ("uniform", "normal")  # --cann-input-dist (taskformat.inputs)
INPUT_COMPAT_MODES = ("fixed", "official")  # --cann-input-compat (taskformat.inputs)
DISPATCH_MODES = ("memory", "xdist")  # --cann-dispatch (workers.dispatch)
POOL_MODES = ("auto", "machine")  # --cann-memory-pool, or a number of GiB (workers.memory_pool)
