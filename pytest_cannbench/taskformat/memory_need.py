"""A case's memory need, estimated from ``proto.yaml`` and ``cases.yaml`` alone, before anything runs.

The estimate is a floor: the bytes that must be held at once in the larger of a case's two phases, never the
operator's temporaries (which no task file states). A case whose floor does not fit the memory plan's slot
cannot be graded on this machine, so it is recorded ``too_large`` up front instead of starting a golden that the
kernel would kill. One that fits the floor but not its real peak still fails as today (``golden_error`` or
``out_of_memory``): one case, never the session.

Outputs are not in the task files; each proto output is taken to be the size of the case's largest input tensor
(true of element-wise, gather, scan and normalisation operators; generous for reductions).

- golden phase (setup, in the golden worker): the native inputs, their fp64 up-cast copies, the fp64 golden
  outputs and the native reference outputs;
- candidate phase (call): the candidate's native inputs and outputs (the shared region) plus the judge's side:
  its own copy of the inputs (checked untouched after the call), the fp64 golden and native reference outputs it
  holds and the comparison's temporaries. (Until 2026-12-05 the judge's input copy was left out: official level 1's
  ``foreach_addcdiv_scalar`` 4 held 2.9 GiB in its candidate phase against 1.8 estimated.)
- kept: the first pass's reference (fp64 golden and native outputs), which the judge keeps through a second
  correctness pass and the timing, on top of either phase there. A case with neither does without it
  (``MemoryNeed.without_kept``). A floating output is
  compared in chunks of :data:`COMPARISON_CHUNK` elements (``judge.error_scan``), so its temporaries are
  :data:`CHUNK_TEMPORARIES` fp64 chunks whatever its size; an integer or bool output is compared whole, with
  :data:`COMPARISON_COPIES` full-size 8-byte temporaries. (Until 2026-12-04 every output was charged two
  full-size copies: official level 1 under ``--cann-session-memory 5`` refused 4 cases whose peak was 3.5 GiB.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_cannbench.taskformat.dtypes import DTYPE_INFO, is_float_name
from pytest_cannbench.taskformat.errors import CaseFormatError
from pytest_cannbench.taskformat.inputs import plan_inputs

if TYPE_CHECKING:
    from pytest_cannbench.taskformat.spec import CaseSpec, OperatorSpec

GOLDEN_ITEMSIZE = 8  # the fp64 golden (and int64 indices)
COMPARISON_COPIES = 2  # an integer output's comparison: both sides widened to 8 bytes (the difference reuses one)
COMPARISON_CHUNK = 1 << 20  # elements of a floating output compared at a time (judge.error_scan.CHUNK)
CHUNK_TEMPORARIES = 12  # fp64 temporaries of one chunk's general path ("a dozen", judge.error_scan)


@dataclass(frozen=True)
class MemoryNeed:
    """The two phases' floors, in bytes."""

    golden: int  # the golden worker's own
    candidate: int  # the candidate worker's and the judge's together
    kept: int = 0  # the first reference, held beside either phase through a second pass and the timing

    @property
    def peak(self) -> int:
        return max(self.golden, self.candidate) + self.kept

    def without_kept(self) -> MemoryNeed:
        """The need of a case with no second pass and no timing (nothing keeps its first reference)."""
        return MemoryNeed(self.golden, self.candidate)

    def describe(self) -> str:
        gib = 1 << 30
        kept = f", first reference kept {self.kept / gib:.1f} GiB" if self.kept else ""
        return f"golden phase {self.golden / gib:.1f} GiB, candidate phase {self.candidate / gib:.1f} GiB{kept}"


def _planned_tensors(spec: OperatorSpec, case: CaseSpec) -> list[Any] | None:
    """The case's input tensors of a known dtype, as planned (no data drawn); None when they cannot be planned."""
    raw = case.raw
    try:
        plans = plan_inputs(spec.input_names, raw.get("input_shape"), raw.get("dtype"), raw.get("value_range"))
    except (CaseFormatError, KeyError, TypeError, ValueError):
        return None
    return [t for plan in plans for t in plan.tensors if t.dtype in DTYPE_INFO]


def estimate(spec: OperatorSpec, case: CaseSpec, world_size: int = 1) -> MemoryNeed | None:
    """The case's floor; None when its inputs cannot be planned (the case fails with that error anyway).

    A multi-rank case (``world_size`` ranks) counts every rank: each holds its own inputs (the case's shapes are a
    rank's) and its outputs, each the size of the largest input, or ``world_size`` times that where proto.yaml's
    shape of the output multiplies by the world size (an all-gather's, ``[M_local * world_size, N]``), in a golden
    rank and a candidate rank, each process charged an idle torch process more than a single-process case's, and
    the judge holds every rank's reference."""
    if world_size > 1 or case.world_size is not None:
        return _ranks(spec, case, max(world_size, case.world_size or 1))
    tensors = _planned_tensors(spec, case)
    if tensors is None:
        return None
    if not tensors:
        return MemoryNeed(0, 0)
    native_in = sum(t.nbytes for t in tensors)
    numel_in = sum(t.numel for t in tensors)
    largest = max(tensors, key=lambda t: t.numel)
    outputs = max(1, len(spec.outputs))
    native_out = outputs * largest.nbytes
    golden_out = outputs * largest.numel * GOLDEN_ITEMSIZE
    golden = native_in + numel_in * GOLDEN_ITEMSIZE + golden_out + native_out
    judge = native_in + golden_out + native_out + comparison_bytes(spec, largest.numel)
    return MemoryNeed(golden=golden, candidate=native_in + native_out + judge, kept=golden_out + native_out)


RANK_PROCESS_BYTES = 256 << 20  # a rank worker's idle memory (torch imported): the memory plan's IDLE_BYTES
GATHERED = re.compile(r"\*\s*\(?\s*\w*world_size|world_size\w*\s*\)?\s*\*")  # "[M * world_size, N]"


def _ranks(spec: OperatorSpec, case: CaseSpec, world_size: int) -> MemoryNeed | None:
    tensors = _planned_tensors(spec, case)
    if tensors is None:
        return None
    if not tensors:
        return MemoryNeed(world_size * RANK_PROCESS_BYTES, world_size * RANK_PROCESS_BYTES)
    native_in = sum(t.nbytes for t in tensors)
    numel_in = sum(t.numel for t in tensors)
    largest = max(tensors, key=lambda t: t.numel)
    # an output whose declared shape multiplies by the world size is gathered: world_size times the largest input
    outputs = sum(world_size if GATHERED.search(out.shape) else 1 for out in spec.outputs) or 1
    native_out = outputs * largest.nbytes
    golden_out = outputs * largest.numel * GOLDEN_ITEMSIZE
    golden_rank = native_in + numel_in * GOLDEN_ITEMSIZE + golden_out + native_out + RANK_PROCESS_BYTES
    candidate_rank = native_in + native_out + RANK_PROCESS_BYTES
    judge = world_size * (native_in + golden_out + native_out) + comparison_bytes(spec, outputs * largest.numel)
    return MemoryNeed(golden=world_size * golden_rank, candidate=world_size * candidate_rank + judge,
                      kept=world_size * (golden_out + native_out))


def comparison_bytes(spec: OperatorSpec, numel: int) -> int:
    """The temporaries of comparing every output (each taken to have ``numel`` elements) with the golden."""
    total = 0
    for out in spec.outputs or [None]:
        floating = out is not None and bool(out.dtypes) and all(is_float_name(d) for d in out.dtypes)
        total += (CHUNK_TEMPORARIES * min(numel, COMPARISON_CHUNK) if floating else COMPARISON_COPIES * numel) \
            * GOLDEN_ITEMSIZE
    return total
