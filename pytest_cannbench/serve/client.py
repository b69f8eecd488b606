"""A Python client of ``cannbench serve`` (httpx): :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

    from pytest_cannbench.serve.client import Client, files_of

    with Client("http://127.0.0.1:8000") as client:
        answer = client.grade(files_of("my_submission/"), select="gelu", profile="quick")
        print(answer["status"], answer["reward"])

Every method returns the answer as the service's JSON (``docs/serve.md``, API). A 4xx raises
:class:`ServiceError` with the field the service named; a 429 is retried after its ``Retry-After`` (up to
``retries`` times) before it raises. The token comes from ``token=`` or ``$CANNBENCH_SERVE_TOKEN``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx

DEFAULT_TIMEOUT_S = 3600.0  # the client waits at least as long as any deadline it may send


class ServiceError(Exception):
    """A refusal: ``status`` (HTTP), ``error``, ``field`` and ``message`` as the service said them."""

    def __init__(self, status: int, body: dict[str, Any], retry_after: float | None = None) -> None:
        self.status, self.error = status, str(body.get("error", ""))
        self.field, self.message = body.get("field"), str(body.get("message", body))
        self.retry_after = retry_after
        super().__init__(f"{status} {self.error}: {self.field + ': ' if self.field else ''}{self.message}")


def files_of(
    directory: str | os.PathLike[str], *, skip: tuple[str, ...] = ("build", "dist", "__pycache__")
) -> dict[str, Any]:
    """A submission directory as ``{"files": ...}`` (UTF-8 text) or, when it holds binary files, as a tar.gz
    ``{"archive": ...}``; build outputs (``skip``) are left out."""
    root = Path(directory)
    paths = [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file() and not set(p.relative_to(root).parts) & set(skip) and ".egg-info" not in str(p)
    ]
    texts: dict[str, str] = {}
    for path in paths:
        try:
            texts[path.relative_to(root).as_posix()] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return archive_of(root, paths)
    return {"files": texts}


def archive_of(root: Path, paths: list[Path] | None = None) -> dict[str, Any]:
    """Files under ``root`` (all, or ``paths``) as ``{"archive": {"format": "tar.gz", "data": base64}}``."""
    paths = paths if paths is not None else [p for p in sorted(root.rglob("*")) if p.is_file()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in paths:
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    return {"archive": {"format": "tar.gz", "data": base64.b64encode(buffer.getvalue()).decode()}}


def _headers(token: str | None) -> dict[str, str]:
    token = token if token is not None else os.environ.get("CANNBENCH_SERVE_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _request(submission: dict[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in options.items() if v is not None}
    if submission is not None:
        body["submission"] = submission
    return body


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = {"message": response.text[:500]}
        after = response.headers.get("retry-after")
        raise ServiceError(
            response.status_code,
            body if isinstance(body, dict) else {"message": str(body)},
            float(after) if after and after.replace(".", "", 1).isdigit() else None,
        )
    return response.json()


class Client:
    def __init__(
        self, url: str, *, token: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, retries: int = 3
    ) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=_headers(token), timeout=timeout)
        self.retries = retries

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return _check(self.http.post(path, json=body))
            except ServiceError as exc:
                if exc.status != 429 or attempt == self.retries:
                    raise
                time.sleep(exc.retry_after or 1.0)
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:
        return dict(_check(self.http.get("/v1/health")))

    def grade(self, submission: dict[str, Any], **options: Any) -> dict[str, Any]:
        """Grade one submission (``select=``, ``operators=``, ``profile=``, ``perf=``, ``deadline_s=``, ``seed=``,
        ``name=``, ``format=``) and wait for the answer."""
        return dict(self._post("/v1/grade", _request(submission, options)))

    def submit(self, submission: dict[str, Any], **options: Any) -> dict[str, Any]:
        """Queue one submission: ``{"id", "queue_position"}``."""
        return dict(self._post("/v1/jobs", _request(submission, options)))

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(_check(self.http.get(f"/v1/jobs/{job_id}")))

    def wait(self, job_id: str, *, poll_s: float = 0.5, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Poll a job until it is answered; its answer."""
        end = time.monotonic() + timeout_s
        while True:
            state = self.job(job_id)
            if state["state"] == "done":
                return dict(state["answer"])
            if time.monotonic() > end:
                raise TimeoutError(f"job {job_id} not answered within {timeout_s} s (last state {state['state']})")
            time.sleep(poll_s)

    def batch(
        self, submissions: list[dict[str, Any]], *, names: list[str] | None = None, **options: Any
    ) -> dict[str, Any]:
        """Grade a group of candidates on the same cases and inputs: every answer and pass@k."""
        candidates = [{"submission": s, **({"name": names[i]} if names else {})} for i, s in enumerate(submissions)]
        return dict(self._post("/v1/batch", {**_request(None, options), "candidates": candidates}))

    def metrics(self) -> str:
        response = self.http.get("/metrics")
        if response.status_code >= 400:
            _check(response)
        return response.text


class AsyncClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = 3,
        max_connections: int = 64,
    ) -> None:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=_headers(token), timeout=timeout, limits=limits)
        self.retries = retries

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return _check(await self.http.post(path, json=body))
            except ServiceError as exc:
                if exc.status != 429 or attempt == self.retries:
                    raise
                await asyncio.sleep(exc.retry_after or 1.0)
        raise AssertionError("unreachable")

    async def health(self) -> dict[str, Any]:
        return dict(_check(await self.http.get("/v1/health")))

    async def grade(self, submission: dict[str, Any], **options: Any) -> dict[str, Any]:
        return dict(await self._post("/v1/grade", _request(submission, options)))

    async def submit(self, submission: dict[str, Any], **options: Any) -> dict[str, Any]:
        return dict(await self._post("/v1/jobs", _request(submission, options)))

    async def job(self, job_id: str) -> dict[str, Any]:
        return dict(_check(await self.http.get(f"/v1/jobs/{job_id}")))

    async def wait(self, job_id: str, *, poll_s: float = 0.5, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        end = time.monotonic() + timeout_s
        while True:
            state = await self.job(job_id)
            if state["state"] == "done":
                return dict(state["answer"])
            if time.monotonic() > end:
                raise TimeoutError(f"job {job_id} not answered within {timeout_s} s (last state {state['state']})")
            await asyncio.sleep(poll_s)

    async def batch(
        self, submissions: list[dict[str, Any]], *, names: list[str] | None = None, **options: Any
    ) -> dict[str, Any]:
        candidates = [{"submission": s, **({"name": names[i]} if names else {})} for i, s in enumerate(submissions)]
        return dict(await self._post("/v1/batch", {**_request(None, options), "candidates": candidates}))
