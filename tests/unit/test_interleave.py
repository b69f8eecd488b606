"""The timed window's protocol (timing/perf.interleave): ABBA on streamed sets, every participant's copy of a set
written before the judge's one eviction for them, none of their calls run yet; real workers, a real flush."""

from __future__ import annotations

import pytest
import torch

from pytest_cannbench.judge.perf import interleave
from pytest_cannbench.workers.candidate_client import CandidateWorker

SITE = '''import torch


def double(x):
    return x * 2


def sneaky(x):
    if float(x[0]) == 2.0:  # set 2 only
        x.add_(1)
    return x * 2


def fragile(x):
    if float(x[0]) > 2.5:  # the sets below make call 3 the first to see this
        raise RuntimeError("gave up")
    return x * 2
'''

TARGET = {"kind": "submission", "name": "double", "function_name": "double", "names": ["double"],
          "rel_path": "level1/double"}


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    root = tmp_path_factory.mktemp("interleave")
    (root / "site" / "cann_bench").mkdir(parents=True)
    (root / "site" / "cann_bench" / "__init__.py").write_text(SITE)
    pair = tuple(CandidateWorker(log_path=root / f"w{i}.log", workdir=root / f"work{i}", threads=1, guard="off",
                                 site_dir=str(root / "site")) for i in range(2))
    for worker in pair:
        worker.start()
    yield pair
    for worker in pair:
        worker.close()


def _sets(count: int) -> list[dict]:
    return [{"x": torch.full((4096,), float(i))} for i in range(count + 1)]  # set i holds i everywhere


def _open(workers, targets, count: int, defer: bool = False):
    calls = list(range(1, count + 1))
    return [w.open_batch(t, _sets(count), calls, warmup=1, expected_out_bytes=4096 * 4, timeout=60,
                         judge_flushes=True, defer=defer) for w, t in zip(workers, targets)]


@pytest.mark.parametrize("each_call", [False, True])
def test_one_eviction_per_set_after_every_copy_is_written(workers, each_call: bool) -> None:
    batches = _open(workers, [TARGET, TARGET], 6)
    seen: list[list[tuple[int, bool]]] = []

    def flush() -> None:  # what the judge's eviction finds: each batch's next call, and whether its set is written
        seen.append([(b.next, b.call_sets[b.next] in b.written) for b in batches if b.waiting])

    interleave(list(zip(workers, batches)), flush, flush_each_call=each_call)
    for b in batches:
        assert b.result is not None and b.result.status == "ok", b.result
        assert len(b.result.seconds) == 6 and [float(o[0][0]) for o in b.result.outputs] == [2.0 * i
                                                                                            for i in range(1, 7)]
    if each_call:  # the protocol before: one eviction before every call, only that call's set written
        assert len(seen) == 12 and all(len(s) <= 2 for s in seen)
    else:
        assert seen == [[(k, True), (k, True)] for k in range(6)]


def test_a_candidate_ending_early_stops_its_baseline(workers) -> None:
    fragile = dict(TARGET, name="fragile", function_name="fragile", names=["fragile"])
    cb, bb = _open(workers, [fragile, TARGET], 6)
    interleave([(workers[0], cb), (workers[1], bb)], lambda: None)
    assert cb.result is not None and cb.result.status == "raised" and "gave up" in cb.result.message
    assert bb.result is not None and bb.result.message == "stopped by the judge"
    assert not cb.waiting and not bb.waiting


def _mapped_region_sizes(pid: int) -> list[int]:
    sizes = []
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            if "memfd:cannbench-region" in line:
                lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
                sizes.append(hi - lo)
    return sizes


def _region_resident(pid: int) -> int:
    """Bytes of the region's pages mapped into ``pid`` now (its largest mapping: the one in use)."""
    best, inside = 0, False
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            if "-" in line.split(" ", 1)[0]:  # a mapping's header line
                inside = "memfd:cannbench-region" in line
            elif inside and line.startswith("Rss:"):
                best = max(best, int(line.split()[1]) * 1024)
    return best


def test_make_room_maps_a_grown_region_before_the_window(workers) -> None:
    """The worker maps (and faults in) the grown region when asked before the window, so the batch that follows
    finds it mapped at that size; asking again at the same size costs nothing the worker does."""
    worker = workers[0]
    big = [{"x": torch.zeros(1 << 22)} for _ in range(3)]  # 16 MiB a set: more than the region has held so far
    before = worker.region.size
    worker.make_room(big, [1, 2], (1 << 22) * 4, timeout=60)
    assert worker.region.size > before and worker.region.size in _mapped_region_sizes(worker.pid)
    assert not worker.region.unfaulted(worker.pid, worker.region.size)  # asking again sends nothing
    batch = worker.open_batch(TARGET, big, [1, 2], warmup=0, expected_out_bytes=(1 << 22) * 4, timeout=60,
                              judge_flushes=True)
    while batch.waiting:
        worker.run_call(batch)
    assert batch.result is not None and batch.result.status == "ok"
    assert batch.result.phases["prepare"] < 0.05  # no mapping left to do in the batch


def test_a_deferred_batch_is_judged_after_the_window_as_it_would_have_been(workers) -> None:
    """The window ends with the batches' final replies unjudged; judged afterwards (the workers frozen, their
    regions untouched) they give the verdicts an immediate judgement gives: an input written into is caught."""
    sneaky = dict(TARGET, name="sneaky", function_name="sneaky", names=["sneaky"])
    cb, bb = _open(workers, [sneaky, TARGET], 4, defer=True)
    interleave([(workers[0], cb), (workers[1], bb)], lambda: None)
    assert cb.result is None and bb.result is None and not cb.waiting and not bb.waiting
    assert cb.claims_ok and bb.claims_ok  # the workers' own word, until judged
    for w, b in zip(workers, (cb, bb)):
        w.conclude(b)
    assert bb.result is not None and bb.result.status == "ok"
    assert cb.result is not None and cb.result.status == "input_mutated" and not cb.claims_ok
    now, = _open(workers[:1], [sneaky], 4)
    interleave([(workers[0], now)], lambda: None)
    assert now.result is not None and (now.result.status, now.result.message) == (cb.result.status,
                                                                               cb.result.message)


def test_a_region_released_after_a_case_is_faulted_in_again_before_the_next_window(workers) -> None:
    """After a case the region gives back its pages past REGION_KEEP, in the judge and in the worker's mapping;
    the next timed batch has the worker fault its part in again in make_room, so no timed call faults a page."""
    worker = workers[1]
    big = [{"x": torch.full((1 << 23,), float(i))} for i in range(4)]  # 32 MiB a set: 224 MiB with the outputs
    worker.make_room(big, [1, 2, 3], (1 << 23) * 4, timeout=60)
    used = worker.region.used
    assert used > 200 << 20 and _region_resident(worker.pid) >= used
    assert worker.region.release() == worker.region.size - (64 << 20)
    assert _region_resident(worker.pid) <= 64 << 20 and worker.region.unfaulted(worker.pid, used)
    assert worker.region.release() == 0  # nothing backed past the kept part: no second release
    worker.make_room(big, [1, 2, 3], (1 << 23) * 4, timeout=60)
    assert _region_resident(worker.pid) >= used
    batch = worker.open_batch(TARGET, big, [1, 2, 3], warmup=0, expected_out_bytes=(1 << 23) * 4, timeout=60,
                              judge_flushes=True)
    while batch.waiting:
        worker.run_call(batch)
    assert batch.result is not None and batch.result.status == "ok"
    assert [float(o[0][-1]) for o in batch.result.outputs] == [2.0, 4.0, 6.0]  # read back past the kept part


def test_populate_backs_the_pages_where_the_kernel_lacks_madv_populate_write() -> None:
    """Kernels before 5.14 refuse MADV_POPULATE_WRITE: one write per page backs the same pages, contents kept."""
    import mmap
    import os

    from pytest_cannbench.workers.candidate_main import populate

    class OldKernel(mmap.mmap):
        def madvise(self, *args: int) -> None:
            raise OSError(22, "Invalid argument")

    fd = os.memfd_create("cannbench-region-test", 0)
    try:
        os.ftruncate(fd, 8 << 20)
        mm = OldKernel(fd, 8 << 20)
        mm[4096 * 3] = 7
        populate(mm, 6 << 20)
        with open(f"/proc/{os.getpid()}/smaps") as fh:
            text = fh.read()
        block = text.split("memfd:cannbench-region-test", 1)[1]
        rss = int(block.split("Rss:", 1)[1].split()[0]) * 1024
        assert 6 << 20 <= rss < 7 << 20 and mm[4096 * 3] == 7
        mm.close()
    finally:
        os.close(fd)
