"""Reward functions in the shapes RL frameworks call, backed by ``cannbench serve``.

verl (``custom_reward_function.path`` = this file's path or a module importing it, ``name`` = one of these):

- :func:`compute_score` ``(data_source, solution_str, ground_truth, extra_info=None)``: one rollout, blocking
  (verl's naive reward manager);
- :func:`compute_score_batch` ``(data_sources, solution_strs, ground_truths, extra_infos=None)``: a list of
  rollouts, blocking (verl's batch reward manager); rollouts with the same ground truth and options go to the
  service as one ``/v1/batch`` (a GRPO group: the same inputs, goldens once);
- :func:`acompute_score` and :func:`acompute_score_batch`: the same as coroutines (async reward loops).

A rollout's text becomes a submission by its fenced code blocks whose info string names a file
(```` ```cpp csrc/gelu.cpp ````, ```` ```python file=cann_bench/__init__.py ````), laid over the scaffold the
dataset gives in ``extra_info["files"]`` (``build.sh``, ``setup.py``...: what the model is not asked to write).
``ground_truth`` is the selection: a ``-k`` expression (``"gelu"``) or ``{"select": ..., "operators": [...]}``.
The service comes from ``extra_info["serve_url"]``, else ``$CANNBENCH_SERVE_URL`` (default
``http://127.0.0.1:8000``); ``extra_info`` may also set ``profile`` (default ``quick``), ``perf`` and
``deadline_s``.

Each result is ``{"score": float, "status": str, "passed": 0|1, "valid": 0|1}``: ``score`` is the answer's
bounded reward (``docs/serve.md``, Reward); a rollout with no named file block scores :data:`NO_CODE`
without a request; an answer without a reward (``harness_error``, the service's fault) or a service that cannot
be reached scores 0 with ``valid`` 0, so a trainer can mask it instead of learning from it.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import defaultdict
from typing import Any

from pytest_cannbench.serve.answer import REWARD_NO_BUILD
from pytest_cannbench.serve.client import AsyncClient, ServiceError

NO_CODE = REWARD_NO_BUILD
DEFAULT_URL = "http://127.0.0.1:8000"
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_PATH_KEY = re.compile(r"(?:file|path|title|name)=[\"']?([^\s\"']+)")
_PATHLIKE = re.compile(r"[\w.-]+(?:/[\w.-]+)+|[\w-][\w.-]*\.[A-Za-z0-9]+")  # csrc/x, build.sh: not "cpp"


def extract_files(solution_str: str) -> dict[str, str]:
    """The files a rollout wrote: fenced blocks whose info string names a path (the last one wins)."""
    files: dict[str, str] = {}
    for info, body in _FENCE.findall(solution_str):
        info = info.strip()
        named = _PATH_KEY.search(info)
        path = named.group(1) if named else next((t for t in reversed(info.split()) if _PATHLIKE.fullmatch(t)), None)
        if path:
            files[path.strip()] = body
    return files


def _options(ground_truth: Any, extra_info: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    extra = extra_info or {}
    url = str(extra.get("serve_url") or os.environ.get("CANNBENCH_SERVE_URL") or DEFAULT_URL)
    options: dict[str, Any] = {"profile": extra.get("profile", "quick")}
    for key in ("perf", "deadline_s", "seed", "format"):
        if key in extra:
            options[key] = extra[key]
    if isinstance(ground_truth, dict):
        options.update({k: ground_truth[k] for k in ("select", "operators") if k in ground_truth})
    elif ground_truth:
        options["select"] = str(ground_truth)
    return url, options


def _submission(solution_str: str, extra_info: dict[str, Any] | None) -> dict[str, Any] | None:
    written = extract_files(solution_str)
    if not written:
        return None
    scaffold = dict((extra_info or {}).get("files") or {})
    return {"files": {**scaffold, **written}}


def _result(answer: dict[str, Any] | None, status: str | None = None) -> dict[str, Any]:
    if answer is None:
        return {
            "score": NO_CODE if status == "no_code" else 0.0,
            "status": status or "unreachable",
            "passed": 0,
            "valid": 1 if status == "no_code" else 0,
        }
    reward = answer.get("reward")
    return {
        "score": float(reward) if reward is not None else 0.0,
        "status": str(answer.get("status")),
        "passed": int(answer.get("status") == "passed"),
        "valid": int(reward is not None),
    }


async def acompute_score_batch(
    data_sources: list[Any],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[dict[str, Any] | None] | None = None,
    **_: Any,
) -> list[dict[str, Any]]:
    """Every rollout's result, in order; rollouts sharing ground truth and options are one batch request."""
    infos = extra_infos or [None] * len(solution_strs)
    results: list[dict[str, Any] | None] = [None] * len(solution_strs)
    groups: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    plans: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for i, (text, truth, info) in enumerate(zip(solution_strs, ground_truths, infos)):
        submission = _submission(text, info)
        if submission is None:
            results[i] = _result(None, "no_code")
            continue
        url, options = _options(truth, info)
        key = (url, repr(sorted(options.items())))
        plans[key] = (url, options)
        groups[key].append((i, submission))

    async def one_group(key: tuple[str, str]) -> None:
        url, options = plans[key]
        members = groups[key]
        try:
            async with AsyncClient(url) as client:
                if len(members) == 1:
                    answers = [await client.grade(members[0][1], **options)]
                else:
                    batch = await client.batch([s for _, s in members], **options)
                    answers = batch["candidates"]
            for (i, _), answer in zip(members, answers):
                results[i] = _result(answer)
        except (ServiceError, OSError, ValueError, KeyError) as exc:
            status = f"service_error: {exc}"[:200]
            for i, _ in members:
                results[i] = _result(None, status)
        except Exception as exc:  # noqa: BLE001 - httpx transport errors: the rollout is masked, never rewarded
            for i, _ in members:
                results[i] = _result(None, f"unreachable: {type(exc).__name__}")

    await asyncio.gather(*(one_group(key) for key in groups))
    return [r if r is not None else _result(None) for r in results]


def compute_score_batch(
    data_sources: list[Any],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[dict[str, Any] | None] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    return asyncio.run(acompute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs))


async def acompute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    return (await acompute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs))[0]


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    return asyncio.run(acompute_score(data_source, solution_str, ground_truth, extra_info, **kwargs))
