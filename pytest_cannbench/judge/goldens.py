"""Golden data for a case, from the disk cache or the golden worker.

The judge never imports a golden: it asks the worker, keeps the answer in the
cache, and takes the generic inputs the worker generated through a mapped file
(workers/input_file.py), or regenerates them itself (they are deterministic) on
a cache hit, so cache entries hold only outputs, the parameter binding and
hook-made inputs.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.judge.golden_cache import GoldenCache, GoldenCacheWarning, cache_key, prune
from pytest_cannbench.options import Settings
from pytest_cannbench.scratch import make_dir
from pytest_cannbench.taskformat.generate import generate_inputs
from pytest_cannbench.taskformat.inputs import plan_inputs
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
from pytest_cannbench.workers import input_file
from pytest_cannbench.workers.golden_binding import describe, source_hash
from pytest_cannbench.workers.golden_client import GoldenWorker, GoldenWorkerFailure
from pytest_cannbench.workers.limits import golden_memory_bytes


def golden_ref(task: OperatorTask) -> dict[str, Any]:
    """Which golden a worker loads: the fields every golden-worker request and golden target start with."""
    return {"op_dir": str(task.op_dir), "rel_path": task.rel_path, "function_name": task.spec.function_name,
            "name_lower": task.spec.name.lower(), "golden_sha256": task.golden_sha256}


def prepare_request(task: OperatorTask, case: CaseSpec, seed: int, *, dist: str, compat: str,
                    precision: str) -> dict[str, Any]:
    """The golden worker's ``prepare`` request for one case and seed (without ``op`` and the reply file)."""
    return {**golden_ref(task), "input_names": task.spec.input_names, "output_names": task.spec.output_names,
            "case": case.raw, "seed": seed, "dist": dist, "compat": compat, "precision": precision}


def describe_native(like: GoldenData | None) -> list[Any] | None:
    """A prepare request's ``like``: the native outputs of ``like`` (dtype name, shape), when they can stand in
    for running the reference on another input set of the same case. Not for a task with a ``get_output`` hook
    (its verdict reads the hook's processed native), nor when ``like`` has no native reference of its own."""
    if like is None or like.native is None or like.native_deferred or like.has_get_output:
        return None

    return describe(like.native)


class GoldenFailure(RuntimeError):
    """The golden side could not produce a reference for the case (a harness error, not the candidate's).
    ``oom``: it ran out of its memory budget (a case with more memory alone may pass: core.memory)."""

    def __init__(self, message: str, oom: bool = False, needs: str = "") -> None:
        super().__init__(message)
        self.oom = oom
        self.needs = needs  # a module the golden needs that this host lacks (torch_npu): not gradable here


@dataclass
class GoldenData:
    make_inputs: Callable[[], list[Any]]  # what the candidate is called with (native dtypes), built on first use
    binding: tuple[Any, ...]  # (param, "input", index) | (param, "attr", value)
    golden: list[Any]
    native: list[Any] | None
    native_error: str | None
    has_get_output: bool
    cached: bool
    hooked: list[Any] | None = None  # inputs made by the golden's get_input hook, else None
    seconds: dict[str, float] = field(default_factory=dict)
    # The native reference was not run (asked ``like`` another input set of the case): ``expected`` holds the
    # output dtypes it would have had, and ``complete`` fetches this same set in full for a verdict that needs it.
    native_deferred: bool = False
    expected: list[Any] | None = None
    complete: Callable[[], GoldenData] | None = None
    _inputs: list[Any] | None = None

    @property
    def inputs(self) -> list[Any]:
        """Generated on demand: a self-check never needs them in the judge, and large cases cost seconds."""
        if self._inputs is None:
            self._inputs = self.make_inputs()
        return self._inputs

    def kwargs(self) -> dict[str, Any]:
        return {name: (self.inputs[value] if source == "input" else value) for name, source, value in self.binding}

    def out_bytes(self) -> int:
        """The size of the outputs a candidate returns (the worker's output area is sized by it)."""
        ref = self.native if self.native is not None else self.golden
        return sum(t.numel() * t.element_size() for t in ref if hasattr(t, "element_size"))


@dataclass
class GoldenService:
    settings: Settings
    worker: GoldenWorker
    cache: GoldenCache | None
    _golden_sha: dict[str, str] = field(default_factory=dict)
    _cache_warned: bool = False
    _scratch: str | None = None
    _replies: int = 0

    def _request(self, task: OperatorTask, case: CaseSpec, seed: int) -> dict[str, Any]:
        s = self.settings
        return prepare_request(task, case, seed, dist=s.input_dist, compat=s.input_compat,
                               precision=s.golden_precision)

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self.worker.request(message, self.settings.golden_timeout_s)
        except GoldenWorkerFailure as exc:
            raise GoldenFailure(str(exc)) from None
        if not response.get("ok"):
            hint = (" (raise cann_golden_memory, e.g. -o cann_golden_memory=16, or make the golden use less memory)"
                    if response.get("oom") else "")
            raise GoldenFailure(f"{response.get('error')}{hint}", oom=bool(response.get("oom")),
                                needs=str(response.get("needs") or ""))
        return response

    def _key(self, task: OperatorTask, case: CaseSpec, seed: int, lean: bool = False) -> str:
        import torch

        sha = task.golden_sha256 or self._golden_sha.get(str(task.op_dir))  # pinned at collection
        if sha is None:
            sha = self._golden_sha[str(task.op_dir)] = source_hash(task.op_dir)
        return cache_key(golden_sha=sha, case=case.raw, seed=seed, dist=self.settings.input_dist,
                         compat=self.settings.input_compat, precision=self.settings.golden_precision,
                         torch_version=torch.__version__, input_names=task.spec.input_names, lean=lean)

    def fetch(self, task: OperatorTask, case: CaseSpec, seed: int, like: GoldenData | None = None) -> GoldenData:
        """The reference for one case and seed. ``like``: the case's reference on another input set; its native
        outputs describe this one's, so the native reference is deferred (``GoldenData.native_deferred``)."""
        described = describe_native(like)
        key = self._key(task, case, seed, lean=described is not None) if self.cache else None
        if self.cache and key and described is not None:  # a full entry serves a lean request too
            entry = self.cache.load(self._key(task, case, seed))
            if entry is not None:
                return self._data(task, case, seed, entry, cached=True)
        entry = self.cache.load(key) if self.cache and key else None
        if entry is not None:
            return self._data(task, case, seed, entry, cached=True, like=like)
        reply, keep = self._reply_file(key)
        inputs_file = self._scratch_file("inputs.bin")
        try:
            response = self._call({**self._request(task, case, seed), "op": "prepare", "reply_file": reply,
                                   "reply_keep": keep, "inputs_file": inputs_file, "like": described})
            data = self._data(task, case, seed, response, cached=False, inputs_file=inputs_file, like=like)
        finally:
            if os.path.exists(inputs_file):  # not mapped (a failed golden, inputs kept in the reply): not kept
                os.unlink(inputs_file)
        if self.cache and key and not response.get("reply_file"):  # not written by the worker: store here
            fields = ("hooked", "golden", "native", "native_error", "has_get_output", "native_deferred")
            stored = self.cache.store(key, {"binding": [list(e) for e in data.binding],
                                            **{name: response[name] for name in fields}})
            if not stored and not self._cache_warned:
                self._cache_warned = True
                warnings.warn(GoldenCacheWarning(f"golden cache stopped writing: {self.cache.disabled_reason}"),
                              stacklevel=2)
        return data

    def _reply_file(self, key: str | None) -> tuple[str, bool]:
        """Where the worker writes its answer: the cache entry itself when caching, else a scratch file."""
        if self.cache and key and self.cache.writable():
            return str(self.cache.path(key)), True
        return self._scratch_file("reply.pt"), False

    def _scratch_file(self, suffix: str) -> str:
        """A new file name in this service's scratch directory (made on first use, removed at close)."""
        if self._scratch is None:
            self._scratch = str(make_dir("golden"))
        self._replies += 1
        return os.path.join(self._scratch, f"{self._replies}-{suffix}")

    def _data(self, task: OperatorTask, case: CaseSpec, seed: int, source: dict[str, Any], *, cached: bool,
              inputs_file: str | None = None, like: GoldenData | None = None) -> GoldenData:
        """GoldenData from a worker response or a cache entry (the same fields). Inputs the worker wrote to
        ``inputs_file`` are mapped now (the file is unlinked; the mapping lasts as long as the tensors)."""
        layout = source.get("inputs_layout")
        if inputs_file and layout is not None and source["hooked"] is None:
            shared = input_file.read(inputs_file, layout)
            make_inputs: Callable[[], list[Any]] = lambda: shared  # noqa: E731 - the maker's signature
        else:
            make_inputs = self._inputs_maker(task, case, seed, source["hooked"])
        deferred = bool(source.get("native_deferred")) and like is not None and like.native is not None
        return GoldenData(make_inputs=make_inputs,
                          binding=tuple(tuple(e) for e in source["binding"]), golden=source["golden"],
                          native=source["native"], native_error=source["native_error"],
                          has_get_output=source["has_get_output"], cached=cached, hooked=source["hooked"],
                          seconds={} if cached else dict(source.get("seconds") or {}), native_deferred=deferred,
                          expected=[n.dtype for n in like.native] if deferred and like and like.native else None,
                          complete=(lambda: self.fetch(task, case, seed)) if deferred else None)

    def _inputs_maker(self, task: OperatorTask, case: CaseSpec, seed: int,
                      hooked: list[Any] | None) -> Callable[[], list[Any]]:
        """Hook-made inputs come from the worker; generic ones are regenerated here, bit for bit."""
        if hooked is not None:
            return lambda: hooked
        settings = self.settings

        def generate() -> list[Any]:
            raw = case.raw
            plans = plan_inputs(task.spec.input_names, raw["input_shape"], raw["dtype"], raw.get("value_range"))
            return generate_inputs(plans, seed, dist=settings.input_dist, compat=settings.input_compat)

        return generate

    def postprocess(self, task: OperatorTask, case: CaseSpec, outputs: dict[str, list[Any] | None]) -> dict[str, Any]:
        response = self._call({"op": "postprocess", **golden_ref(task), "output_names": task.spec.output_names,
                               "attrs": case.attrs, "outputs": outputs})
        return response["outputs"]

    def close(self) -> None:
        self.worker.close()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)


def make_service(settings: Settings, log_dir: Path, threads: int, memory: int | None = None) -> GoldenService:
    """The golden service; ``memory`` is the worker's address-space budget (the session's memory plan), else
    --cann-golden-memory or the default share of :func:`~pytest_cannbench.workers.limits.golden_memory_bytes`."""
    if memory is None:
        memory = golden_memory_bytes(asked=int(settings.golden_memory_gib * (1 << 30))
                                     if settings.golden_memory_gib else None)
    worker = GoldenWorker(log_path=log_dir / "golden-worker.log", memory_bytes=memory, threads=threads)
    # secret seeds never repeat, so their goldens would only fill the cache
    floor = int(settings.golden_cache_min_free_gib * (1 << 30))
    cache = (GoldenCache(Path(settings.golden_cache), min_free_bytes=floor)
             if settings.golden_cache and not settings.secret else None)
    return GoldenService(settings=settings, worker=worker, cache=cache)


def tidy_cache(settings: Settings) -> list[str]:
    """Bound the golden cache between sessions (golden_cache.prune, to ``--cann-golden-cache-max``): what went,
    as a line for the summary, or nothing. Run by the controller once no worker writes any more."""
    if not settings.active or not settings.golden_cache or settings.golden_cache_max_gib is None:
        return []

    limit = int(settings.golden_cache_max_gib * (1 << 30))
    pruned = prune(Path(settings.golden_cache), limit)
    return [pruned.describe(limit)] if pruned.removed else []
