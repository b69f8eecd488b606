"""GPU clocks, temperature and power around each timed window on CUDA.

A kernel timed while the GPU throttles (power cap, thermal or hardware slowdown) runs slower for reasons that
have nothing to do with the kernel, and the slowdown need not hit the candidate and its baseline alike. The
judge (never the untrusted candidate worker) reads the card at the start and the end of every timed window:
through NVML (``pynvml``, packaged as ``nvidia-ml-py``) where it imports, else by running ``nvidia-smi``.
:func:`throttled` is the rule that flags a window ``gpu_throttled``; the judge retries such a window once on
fresh input sets and records the flag when the retry throttles too (``judge/perf.py``). Where neither
backend works the telemetry is 'unavailable', with the reason, and no case is ever failed for it.

The index is the physical one the judge plans with (``DevicePlan.physical_id``). NVML numbers cards in PCI
bus order while CUDA by default numbers the fastest first: set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` on a host
with mixed cards so the two agree.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

SMI_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks.mem", "temperature.gpu", "power.draw", "power.limit",
              "clocks_throttle_reasons.active")
SMI_TIMEOUT_S = 10.0

# NVML's clock-event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*)
REASON_GPU_IDLE = 0x1
REASON_APPLICATIONS_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
# the ones that slow a busy kernel down: power, thermal and hardware slowdowns (not idling, not a clock setting)
THROTTLE_MASK = (REASON_SW_POWER_CAP | REASON_HW_SLOWDOWN | REASON_SW_THERMAL | REASON_HW_THERMAL
                 | REASON_HW_POWER_BRAKE)
REASON_NAMES = {REASON_SW_POWER_CAP: "sw_power_cap", REASON_HW_SLOWDOWN: "hw_slowdown",
                REASON_SW_THERMAL: "sw_thermal", REASON_HW_THERMAL: "hw_thermal",
                REASON_HW_POWER_BRAKE: "hw_power_brake"}

CLOCK_DROP_MHZ = 50.0  # SOL-ExecBench's tolerance for a locked clock: a window's SM clock may not fall further
# A busy SM clock below half the card's maximum: a heavy slowdown. Half, not more, so that clocks locked at a
# data-centre part's base clock (0.55-0.8 of its maximum: A100, H100) are not flagged; some inference parts
# (L4) have a base clock below half the maximum and are flagged when locked there.
MIN_CLOCK_FRACTION = 0.5


@dataclass
class GpuReading:
    """One reading of one card; None where the card or driver does not report a field."""

    sm_mhz: float | None = None
    sm_max_mhz: float | None = None
    mem_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    reasons: int | None = None  # the active clock-event reason bits
    source: str = ""  # nvml or nvidia-smi

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> GpuReading:
        fields: dict[str, Any] = {k: data[k] for k in GpuReading.__dataclass_fields__ if k in data}
        return GpuReading(**fields)


def _number(text: str) -> float | None:
    """A numeric field of ``nvidia-smi --format=csv,noheader,nounits``; ``[N/A]``, ``[Not Supported]`` and
    the like are None."""
    text = text.strip()
    if not text or text.startswith("[") or text.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _bits(text: str) -> int | None:
    """The throttle-reason field: a hex bitmask such as ``0x0000000000000004``."""
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else None
    except ValueError:
        return None


def parse_smi(text: str) -> list[GpuReading]:
    """Every card's reading from the output of ``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,
    nounits`` (one line per card, in the order asked). Lines with the wrong number of fields are skipped."""
    readings = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(SMI_FIELDS):
            continue
        sm, sm_max, mem, temp, power, limit = (_number(p) for p in parts[:6])
        readings.append(GpuReading(sm, sm_max, mem, temp, power, limit, _bits(parts[6]), "nvidia-smi"))
    return readings


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if bits & bit] or [hex(bits)]


def throttled(start: GpuReading | None, end: GpuReading | None) -> str | None:
    """Why a window was timed on a throttled GPU, or None. The rule: at its start or end a power, thermal or
    hardware-slowdown reason was active; or the SM clock at its end (not marked idle) was more than
    ``CLOCK_DROP_MHZ`` below the start's; or a reading not marked idle showed the SM clock below
    ``MIN_CLOCK_FRACTION`` of the maximum. Missing fields never flag (a card that reports nothing is
    'unknown', not throttled)."""
    readings = [(label, r) for label, r in (("start", start), ("end", end)) if r is not None]

    def idle(r: GpuReading) -> bool:  # an idle card's clock is low by design, not throttled
        return r.reasons is not None and bool(r.reasons & REASON_GPU_IDLE)

    for label, r in readings:
        if r.reasons is not None and r.reasons & THROTTLE_MASK:
            return f"throttle reason {'+'.join(reason_names(r.reasons & THROTTLE_MASK))} active at the {label}"
    if (start is not None and end is not None and start.sm_mhz is not None and end.sm_mhz is not None
            and not idle(end)):
        if end.sm_mhz < start.sm_mhz - CLOCK_DROP_MHZ:
            return f"SM clock fell from {start.sm_mhz:.0f} to {end.sm_mhz:.0f} MHz during the window"
    for label, r in readings:
        if (not idle(r) and r.sm_mhz is not None and r.sm_max_mhz
                and r.sm_mhz < MIN_CLOCK_FRACTION * r.sm_max_mhz):
            return (f"SM clock {r.sm_mhz:.0f} MHz at the {label}, below {MIN_CLOCK_FRACTION:g} of its maximum "
                    f"{r.sm_max_mhz:.0f} MHz")
    return None


def window_throttled(window: dict[str, Any]) -> str | None:
    """:func:`throttled` of a recorded window (``{"start": reading dict, "end": ...}``, as :class:`Telemetry`
    records it; an 'unavailable' window is never throttled)."""
    def reading(key: str) -> GpuReading | None:
        value = window.get(key)
        return GpuReading.from_dict(value) if isinstance(value, dict) and "unavailable" not in value else None

    return throttled(reading("start"), reading("end"))


class Telemetry:
    """The judge's reader of one process: NVML if it imports and initialises, else ``nvidia-smi``, else
    unavailable (``reason`` says why, and is the only thing said about it)."""

    def __init__(self) -> None:
        self.backend: str | None = None
        self.reason = ""
        self._nvml: Any = None
        self._probed = False

    def _probe(self) -> None:
        self._probed = True
        try:
            import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

            pynvml.nvmlInit()
            self._nvml, self.backend = pynvml, "nvml"
            return
        except Exception as exc:  # noqa: BLE001 - not installed, or no driver: try nvidia-smi
            why = f"NVML: {type(exc).__name__}: {exc}"
        if shutil.which("nvidia-smi"):
            self.backend = "nvidia-smi"
            return
        self.reason = f"{why}; nvidia-smi: not on PATH"

    def read(self, index: int | str) -> dict[str, Any]:
        """Card ``index``'s reading (a physical index, or a UUID) as a dict, or ``{"unavailable": reason}``;
        never raises."""
        if not self._probed:
            self._probe()
        try:
            if self.backend == "nvml":
                return _nvml_reading(self._nvml, index).to_dict()
            if self.backend == "nvidia-smi":
                return _smi_reading(index).to_dict()
        except Exception as exc:  # noqa: BLE001 - telemetry never fails a case
            return {"unavailable": f"{self.backend}: {type(exc).__name__}: {exc}"[:300]}
        return {"unavailable": self.reason}


def _smi_reading(index: int | str) -> GpuReading:
    done = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits",
                           "-i", str(index)], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True)
    readings = parse_smi(done.stdout)
    if len(readings) != 1:
        raise ValueError(f"expected one line for GPU {index}, got {done.stdout.strip()[:200]!r}")
    return readings[0]


def _nvml_reading(nvml: Any, index: int | str) -> GpuReading:
    handle = (nvml.nvmlDeviceGetHandleByUUID(index) if isinstance(index, str) else
              nvml.nvmlDeviceGetHandleByIndex(index))

    def get(name: str, *args: Any, scale: float = 1.0) -> float | None:
        try:
            return float(getattr(nvml, name)(handle, *args)) * scale
        except Exception:  # noqa: BLE001 - NotSupported on this card or driver
            return None

    reasons = None
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        if hasattr(nvml, name):
            value = get(name)
            reasons = int(value) if value is not None else None
            break
    return GpuReading(sm_mhz=get("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM),
                      sm_max_mhz=get("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM),
                      mem_mhz=get("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM),
                      temp_c=get("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU),
                      power_w=get("nvmlDeviceGetPowerUsage", scale=1e-3),
                      power_limit_w=get("nvmlDeviceGetEnforcedPowerLimit", scale=1e-3),
                      reasons=reasons, source="nvml")
