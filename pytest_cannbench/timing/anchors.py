"""T_baseline and T_HW of a case: official metadata where it covers the hardware, live anchors otherwise.

* Metadata (``metadata/<hw>.json``, :mod:`anchors`) is used when the hardware key
  is known: ``--cann-hardware``, or the NPU's name through the alias table. It
  gives both anchors, with the official fallback to 910b2 and its warnings.
* Live anchors everywhere else (the CPU, GPUs): T_baseline is the golden in native
  precision timed on the device by :mod:`perfrun`; T_HW is the roofline of the
  case's bytes and FLOPs (the proto's ``perf_model``, else inputs + outputs read
  or written once) over this machine's measured bandwidth and peak
  (:mod:`roofline`, calibrated once and cached).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench.options import Settings
from pytest_cannbench.taskformat.metadata import MetadataAnchors
from pytest_cannbench.taskformat.perf_model import TensorFacts, default_bytes, estimate_work
from pytest_cannbench.timing.calibrate import CalibrationError
from pytest_cannbench.timing.devices import DevicePlan
from pytest_cannbench.timing.roofline import cached_limits, t_hw_us


class CannAnchorWarning(UserWarning):
    """Metadata anchors fell back to another hardware's file, or a value is missing or suspicious."""


def hardware_key(settings: Settings, device: DevicePlan) -> str | None:
    """The metadata hardware key: the override, else the NPU's name; None means live anchors."""
    if settings.hardware:
        return settings.hardware
    if device.kind == "npu":
        import torch

        return torch.npu.get_device_name(0)  # type: ignore[attr-defined]
    return None


def roofline_limits(cache_dir: Path, device: DevicePlan, threads: int, announce: Any = None) -> Any:
    return cached_limits(cache_dir / "roofline", "cpu" if device.kind == "cpu" else device.kind, threads,
                         announce=announce)


def roofline_line(cache_dir: Path, device: DevicePlan, threads: int, announce: Any = None) -> str:
    """The header's T_HW line. A calibration that fails is said there and never ends the session: every timed
    case then fails with the same reason (harness_error), without measuring again."""
    try:
        limits = roofline_limits(cache_dir, device, threads, announce)
    except CalibrationError as exc:
        return f"cannbench: T_HW UNAVAILABLE, timed cases fail as harness_error: {exc}"[:600]
    return f"cannbench: T_HW from the {limits.describe()}"


def tensor_facts(task: Any, data: Any) -> dict[str, Any]:
    """Shapes and element sizes of the case's inputs and reference outputs, by proto name."""
    def facts(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            return [TensorFacts.of(v) for v in value if v is not None]
        return TensorFacts.of(value)

    out = {name: facts(data.inputs[i]) if i < len(data.inputs) else None
           for i, name in enumerate(task.spec.input_names)}
    reference = data.native if data.native is not None else data.golden
    for i, name in enumerate(task.spec.output_names):
        out[name] = facts(reference[i]) if i < len(reference) else None
    return out


def case_attrs(task: Any, case: Any) -> dict[str, Any]:
    attrs = {a.name: a.default for a in task.spec.attrs if a.has_default}
    attrs.update(case.attrs)
    return attrs


def make_anchor_source(settings: Settings, device: DevicePlan, cache_dir: Path,
                       threads: int) -> Callable[[Any, Any, Any], dict[str, Any]]:
    """A function of (task, case, golden data) giving the case's anchors and their sources."""
    key = hardware_key(settings, device)
    metadata: dict[Path, Any] = {}
    warned: set[str] = set()
    limits: list[Any] = []

    def from_metadata(task: Any, case: Any) -> dict[str, Any] | None:
        store = metadata.get(task.bench_root)
        if store is None:
            store = metadata[task.bench_root] = MetadataAnchors.from_bench_root(task.bench_root, key)
        anchor = store.lookup(task.rel_path, case.case_id)
        for message in store.warnings:
            if message not in warned:
                warned.add(message)
                warnings.warn(CannAnchorWarning(message), stacklevel=2)
        if anchor is None:
            return None
        return {"t_baseline_us": anchor.baseline_us, "baseline_source": anchor.source, "t_hw_us": anchor.t_hw_us,
                "t_hw_source": anchor.source, "flags": list(anchor.flags)}

    def anchors(task: Any, case: Any, data: Any) -> dict[str, Any]:
        facts = tensor_facts(task, data)
        nbytes, flops = estimate_work(task.spec.perf_model, facts, case_attrs(task, case))
        found = from_metadata(task, case) if key else None
        if found is not None:
            return {**found, "bytes": nbytes, "flops": flops}
        if not limits:
            limits.append(roofline_limits(cache_dir, device, threads))
        source = "roofline (perf_model)" if task.spec.perf_model is not None else "roofline (inputs+outputs once)"
        written = default_bytes({name: facts.get(name) for name in task.spec.output_names})
        return {"t_hw_us": t_hw_us(nbytes, flops, limits[0]), "t_hw_source": source, "bytes": nbytes,
                "flops": flops, "t_hw_written_us": t_hw_us(written, None, limits[0])}

    return anchors


@dataclass(frozen=True)
class BaselineCheck:
    """T_HW after checking it against the live baseline's fastest call (:func:`check_t_hw`)."""

    t_hw_us: float
    source_suffix: str = ""  # appended to t_hw_source when the bound changed
    flag: str | None = None
    note: str | None = None


def check_t_hw(t_hw: float, written_us: float | None, fastest_baseline_us: float | None) -> BaselineCheck:
    """A roofline is a lower bound only if the work it counts is compulsory. The trusted baseline ran every timed
    call on this machine, so its fastest call bounds T_HW from above: when it beat the roofline, the model counted
    traffic the operator need not move (an index or a mask selects what is read, a broadcast is read once, a
    ``perf_model`` over-counts), and T_HW falls back to the bytes the outputs must be written with
    (``t_hw_outputs_only``). If even that is above the baseline, the bandwidth itself was under-measured: the
    anchor stays and the case is flagged ``baseline_below_t_hw`` by scoring (docs/timing.md)."""
    if fastest_baseline_us is None or written_us is None or fastest_baseline_us >= t_hw or written_us >= t_hw:
        return BaselineCheck(t_hw)
    note = (f"the live baseline's fastest call ({fastest_baseline_us:.1f} us) beat the roofline of the modelled "
            f"traffic ({t_hw:.1f} us): not all of it is compulsory, so T_HW counts only the bytes the outputs "
            f"must be written with ({written_us:.1f} us)")
    return BaselineCheck(written_us, " -> outputs only", "t_hw_outputs_only", note)
