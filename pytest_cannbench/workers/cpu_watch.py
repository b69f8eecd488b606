"""The judge's kernel-side watch over one candidate or baseline worker: its CPU budget, its CPU meter, its code.

One :class:`CpuWatch` per worker handle (``WorkerClient.watch``): the spawn runs under the timing thread budget's
affinity (:mod:`cpu_budget`), the meter is opened on the new worker before it starts a thread (:mod:`cpu_meter`),
and after each call and batch, with the worker frozen, the judge looks for code it patched in memory
(``guard.code_pages``) and for threads let out of the budget. The golden worker's watch has no budget and is never
opened.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_cannbench.guard import code_pages
from pytest_cannbench.outcome import API_TAMPERED
from pytest_cannbench.workers import cpu_budget
from pytest_cannbench.workers.contract import thread_cpu
from pytest_cannbench.workers.cpu_meter import KEEPS_EXITED, SCHEDSTAT, CpuMeter, Reading, probe_kind, used

_VDSO: list[bool] = []  # whether this machine's processes get a vDSO, read once


def _vdso_expected() -> bool:
    if not _VDSO:
        _VDSO.append(code_pages.vdso_expected())
    return _VDSO[0]


@dataclass
class CpuWatch:
    cpus: tuple[int, ...] = ()  # the timing thread budget as CPUs; () leaves the worker the judge's
    budget_note: str = ""  # why the budget could not be set at the last spawn ("" when it was, or there is none)
    meter: CpuMeter | None = None
    pages_note: str = ""  # why the code-page check could not read the worker's pages ("" when it could)

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around the spawn: the calling thread runs on the budget's CPUs, which the child inherits."""
        if not self.cpus:
            yield
            return
        with cpu_budget.pinned(self.cpus) as why:
            self.budget_note = why
            yield

    def open(self, pid: int) -> None:
        """The meter of a worker just spawned (it has not started a thread yet: they all inherit it)."""
        self.close()
        self.meter = CpuMeter.open(pid)

    def read(self, pid: int) -> Reading:
        """The worker's CPU time now: the meter's total and each living thread's."""
        return self.meter.read() if self.meter is not None else Reading(None, thread_cpu(pid))

    def used(self, before: Reading, pid: int) -> tuple[float | None, float | None]:
        """``(all threads, busiest living thread)`` CPU seconds since ``before`` (:func:`cpu_meter.used`)."""
        return used(before, self.read(pid))

    def tampering(self, pid: int | None, mode: str) -> list[tuple[str, str]]:
        """What the judge finds itself in a frozen submission worker: code pages written or replaced in memory and
        threads let out of the timing thread budget (``api_tampered``). Trusted goldens are not read."""
        if mode == "golden" or pid is None:
            return []
        unread: list[str] = []
        found = code_pages.findings(pid, expect_vdso=_vdso_expected(), unread=unread)
        self.pages_note = unread[0] if unread else ""
        wide = cpu_budget.widened(pid, self.cpus) if not self.budget_note else ""
        return found + ([(API_TAMPERED, wide)] if wide else [])

    def marks(self) -> dict[str, str]:
        """What a batch result carries of the watch: the meter's kind and each weaker mode's reason."""
        meter = self.meter
        return {"meter": meter.kind if meter is not None else SCHEDSTAT,
                "meter_note": meter.note if meter is not None else "", "budget_note": self.budget_note,
                "pages_note": self.pages_note}

    def close(self) -> None:
        meter, self.meter = self.meter, None
        if meter is not None:
            meter.close()


def for_judge(threads: int, worker_id: str, device: str = "cpu", slot: int | None = None) -> CpuWatch:
    """The watch of a candidate or baseline worker of the judge ``worker_id`` (xdist's ``gwN``, or ``main``). A
    session run inside an xdist worker without being one (pytester's inline runs) takes that worker's index, so
    that sessions running side by side get CPUs of their own (``timing.devices.worker_index``'s rule). ``slot``,
    where given, is the judge's index instead (a service's judge: ``cpu_budget.claim_slot``)."""
    if worker_id == "main":
        worker_id = os.environ.get("PYTEST_XDIST_WORKER", "main")
    index = int(worker_id[2:]) if worker_id.startswith("gw") and worker_id[2:].isdigit() else 0
    if slot is not None:
        index = slot
    if device.startswith("npu"):  # its runtime starts processes and may place its threads: left to it
        return CpuWatch(budget_note="an NPU worker's runtime manages its threads' CPUs (the device time is timed)")
    return CpuWatch(cpus=cpu_budget.budget_cpus(threads, index))


def header_line(threads: int, processes: int, device: str = "cpu") -> str:
    line = cpu_budget.header_line(threads, processes, probe_kind())
    if device.startswith("npu"):
        return line.replace("timing thread budget enforced by CPU affinity", "timing thread budget NOT ENFORCED on "
                            "NPU workers (their runtime places its threads; the device time is timed), else by "
                            "CPU affinity", 1)
    return line


def board_config(threads: int, processes: int, device: str = "cpu") -> dict[str, object]:
    """The board's ``config.cpu_budget``: how the thread budget is enforced, per judge, and the CPU meter."""
    meter = probe_kind()
    budget = cpu_budget.describe(threads, processes)
    if device.startswith("npu"):
        budget = {**budget, "enforced_by": "nothing", "weak": "NPU workers: their runtime places its threads"}
    return {**budget, "threads": threads, "cpu_meter": meter, "cpu_meter_keeps_exited": meter in KEEPS_EXITED}
