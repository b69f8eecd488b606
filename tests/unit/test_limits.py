"""Inherited limits: cgroup v1/v2 memory and CPU files read from a fake /sys/fs/cgroup, budgets clamped to them."""

from __future__ import annotations

from pathlib import Path

from pytest_cannbench.workers import limits


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_memory_max_of_own_group_and_ancestors(tmp_path: Path) -> None:
    _write(tmp_path / "user.slice" / "job" / "memory.max", "max\n")
    _write(tmp_path / "user.slice" / "memory.max", str(6 << 30))
    assert limits.cgroup_memory_bytes("0::/user.slice/job\n", tmp_path) == 6 << 30
    _write(tmp_path / "user.slice" / "job" / "memory.max", str(2 << 30))
    assert limits.cgroup_memory_bytes("0::/user.slice/job\n", tmp_path) == 2 << 30


def test_cgroup_v1_limit_in_bytes_and_unlimited_values(tmp_path: Path) -> None:
    text = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n"
    _write(tmp_path / "memory" / "docker" / "abc" / "memory.limit_in_bytes", "9223372036854771712")
    assert limits.cgroup_memory_bytes(text, tmp_path) is None  # v1 writes 2**63 (page-rounded) for none
    _write(tmp_path / "memory" / "memory.limit_in_bytes", str(3 << 30))
    assert limits.cgroup_memory_bytes(text, tmp_path) == 3 << 30
    assert limits.cgroup_memory_bytes("", tmp_path) is None


def test_cgroup_cpu_quota(tmp_path: Path) -> None:
    _write(tmp_path / "job" / "cpu.max", "250000 100000\n")
    assert limits.cgroup_cpus("0::/job\n", tmp_path) == 2
    _write(tmp_path / "job" / "cpu.max", "max 100000\n")
    assert limits.cgroup_cpus("0::/job\n", tmp_path) is None


def test_budgets_are_clamped_to_the_inherited_limits() -> None:
    free = limits.Inherited(physical=100 << 30, cgroup_memory=None, address_space=None, open_files=None,
                            processes=None, file_size=None, cpus=None)
    assert limits.golden_memory_bytes(free) == int((100 << 30) * 0.8)
    assert limits.candidate_memory_bytes(free) == 50 << 30
    boxed = limits.Inherited(physical=100 << 30, cgroup_memory=10 << 30, address_space=16 << 30, open_files=256,
                             processes=None, file_size=None, cpus=None)
    assert limits.golden_memory_bytes(boxed) == 8 << 30  # 80% of the cgroup, not of RAM
    assert limits.golden_memory_bytes(boxed, asked=40 << 30) == 16 << 30  # never above ulimit -v
    assert limits.candidate_memory_bytes(boxed, asked=40 << 30) == 10 << 30
    line = limits.header_line(boxed, 8 << 30, 5 << 30, 1)
    assert "golden worker address space 8.0 GiB" in line and "cgroup 10.0 GiB" in line and "ulimit -n 256" in line


def test_device_ids_all_is_the_default_and_spreads_over_every_card() -> None:
    """Like the official harness: with no device ids (or 'all'), xdist workers use every visible card."""
    from pytest_cannbench.timing.devices import all_ids, parse_ids, plan

    assert parse_ids(None) == parse_ids("all") == parse_ids(" ALL ") == []
    assert all_ids("cuda", {}, 8) == list(range(8))
    assert all_ids("npu", {"ASCEND_RT_VISIBLE_DEVICES": "4,6"}, 2) == [4, 6]  # physical ids, as the env names them
    assert all_ids("cuda", {}, 0) == [0]
    assert [plan("npu", all_ids("npu", {}, 8), f"gw{k}").physical_id for k in range(10)] == [*range(8), 0, 1]
    assert plan("cpu", [], "gw3").physical_id is None


def test_cards_named_by_uuid_reach_the_workers_as_named() -> None:
    """CUDA_VISIBLE_DEVICES=GPU-<uuid>,...: renumbering them 0..n-1 would give a worker the host's card 0, which
    may be someone else's; each worker gets one UUID, as the variable spells it."""
    from pytest_cannbench.timing.devices import all_ids, plan

    env = {"CUDA_VISIBLE_DEVICES": "GPU-5e1f0c3a-77d2-4b1e-9a0c-1d2e3f405060, MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"}
    ids = all_ids("cuda", env, 1)  # torch counts what the variable lets it see
    assert ids == ["GPU-5e1f0c3a-77d2-4b1e-9a0c-1d2e3f405060", "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"]
    second = plan("cuda", ids, "gw1")
    assert second.env == {"CUDA_VISIBLE_DEVICES": "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"}
    assert second.worker_device == "cuda:0" and second.label == "cuda:MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
    assert all_ids("cuda", {"CUDA_VISIBLE_DEVICES": "3,1"}, 2) == [3, 1]  # numbers stay numbers


def test_cache_dir_without_a_home(monkeypatch) -> None:
    """No $HOME and no passwd entry (Path.home raises): the per-machine cache goes to the temp directory."""
    import tempfile

    from pytest_cannbench import scratch

    for name in ("CANNBENCH_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert scratch.cache_dir() == Path(tempfile.gettempdir()) / f"pytest-cannbench-{__import__('os').getuid()}"


def test_jit_build_children_one_per_two_cores() -> None:
    """KernelBench generations compile at import, one extension after another in a build child: on the H200's 16
    cores five load_inline extensions took 200 s that way. A child per two cores, at most 8, none beyond the work;
    a 2-core machine keeps the single child (and its single log)."""
    from pytest_cannbench.submission.jit_build import jobs

    assert [jobs(n, 16) for n in (0, 1, 5, 12)] == [1, 1, 5, 8]
    assert jobs(40, 2) == 1 and jobs(40, 3) == 1 and jobs(40, 6) == 3 and jobs(40, 64) == 8
