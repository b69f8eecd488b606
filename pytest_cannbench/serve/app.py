"""The HTTP front: a FastAPI app over a :class:`Service` (the catalog, the dispatcher, the secret keeper).

Every refusal is JSON ``{"error", "field", "message"}`` (``schema.ErrorAnswer``) naming the field at fault:
400 for a body that is not UTF-8 JSON, 401 without the token, 403 for a server path outside the submissions
root, 404 for an unknown job, 413 for a body over ``--max-body-mib``, 422 for a field that fails its checks
(unknown fields, traversal, limits, an unknown operator, a format this server does not grade), 429 with
``Retry-After`` when the queue is full, 503 with ``Retry-After`` while draining. A refused request changes
nothing: it is checked whole before anything is queued.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from pytest_cannbench import __version__
from pytest_cannbench.serve import schema
from pytest_cannbench.serve.answer import batch_answer, goldens_computed
from pytest_cannbench.serve.catalog import Catalog
from pytest_cannbench.serve.dispatch import Dispatcher, Draining, Job, QueueFull, wait_all
from pytest_cannbench.serve.intake import BadRequest, Limits, payload_of
from pytest_cannbench.serve.metrics import Metrics
from pytest_cannbench.serve.profiles import PROFILES, overrides_for, settings_hash
from pytest_cannbench.serve.rotation import SecretKeeper

API_VERSION = "1"  # the API's own version (its paths' /v1), not the package's: the published schema stays put
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass
class Service:
    catalog: Catalog
    dispatcher: Dispatcher
    keeper: SecretKeeper
    metrics: Metrics
    limits: Limits
    token: str | None
    submissions_root: str | None
    guard: str
    sandbox: str
    commit: str | None
    max_body: int
    format: str = "cann"
    devices: dict[str, float] = field(default_factory=dict)
    caps: dict[str, float] = field(default_factory=dict)  # --case-timeout, --build-timeout: caps on the profiles

    # ------------------------------------------------------------------------------------------ requests to jobs

    def jobs_for(self, request: schema.Options, named: list[tuple[str | None, schema.Submission, str]]) -> list[Job]:
        """The jobs of one request, every field checked first (:class:`BadRequest` naming the field)."""
        if request.format != self.format:
            raise BadRequest(
                "format",
                f"this server grades {self.format!r} submissions (its task tree is "
                f"{self.catalog.tasks}); {request.format!r} cannot be graded here yet",
            )
        cases = self.catalog.select(request.select, request.operators)
        payloads = [payload_of(sub, self.limits, self.submissions_root, where) for _, sub, where in named]
        profile = PROFILES[request.profile]
        deadline = time.monotonic() + (request.deadline_s or profile.deadline_s)
        epoch = self.keeper.take() if request.seed.policy == "secret" else None
        seed: dict[str, Any] = (
            {"policy": "secret", "epoch": epoch.number, "commitment": epoch.commitment}
            if epoch is not None
            else {"policy": "fixed", "value": request.seed.value}
        )
        overrides = overrides_for(
            profile.name,
            perf=request.perf,
            policy=request.seed.policy,
            value=request.seed.value,
            secret=epoch.secret if epoch else "",
            caps=self.caps,
        )
        stuck = overrides["build_timeout_s"] + overrides["case_timeout_s"] + 900.0  # a golden may take minutes
        flags = ["seed_public"] if epoch is None else []
        jobs = []
        for i, ((name, _, _), payload) in enumerate(zip(named, payloads)):
            if epoch is not None and i:
                epoch.users += 1  # one epoch for the whole group, held by every candidate
            provenance = {
                "version": __version__,
                "commit": self.commit,
                "torch": None,
                "device": None,
                "judge": None,
                "node": None,
                "settings_hash": settings_hash(overrides),
                "profile": profile.name,
                "seed": seed,
                "guard": self.guard,
                "sandbox": self.sandbox,
                "flags": flags,
            }
            job = Job(
                id=_job_id(),
                cases=cases,
                payload=payload,
                overrides=overrides,
                perf=request.perf,
                provenance=provenance,
                deadline=deadline,
                stuck_s=stuck,
                epoch=epoch,
                name=name,
            )
            job.on_finish.append(self._finished)
            jobs.append(job)
        return jobs

    def _finished(self, job: Job) -> None:
        answer = job.answer or {}
        job.provenance["flags"] = sorted(set(job.provenance.get("flags") or []))
        self.metrics.answers.labels(answer.get("status", "?")).inc()
        for case in answer.get("cases") or []:
            self.metrics.cases.labels(case["status"], case["code"] or "none").inc()
        if job.epoch is not None:
            self.keeper.release(job.epoch)
            job.epoch = None

    def submit(self, jobs: list[Job]) -> None:
        try:
            self.dispatcher.submit(jobs)
        except (QueueFull, Draining):
            for job in jobs:
                if job.epoch is not None:
                    self.keeper.release(job.epoch)
                    job.epoch = None
            raise

    def health(self) -> dict[str, Any]:
        judges = [
            {
                "name": j.name,
                "node": j.info.get("node"),
                "host": j.info.get("host"),
                "pid": j.info.get("pid"),  # the actor's process: what an operator kills or profiles
                "device": j.info.get("device"),
                "state": j.state,
                "busy_s": round(j.busy_s, 3),
                "graded": j.graded,
                "cpu_slot": j.info.get("cpu_slot"),  # its workers' CPU block on its host
            }
            for j in self.dispatcher.judges
        ]
        degraded = any(j.state in ("starting", "restarting") for j in self.dispatcher.judges)
        return {
            "status": "draining" if self.dispatcher.draining else "degraded" if degraded else "ok",
            "version": __version__,
            "judges": judges,
            "devices": self.devices,
            "queue_depth": len(self.dispatcher.pending),
            "in_flight": len(self.dispatcher.running),
            "queue_capacity": self.dispatcher.capacity,
            "format": self.format,
            "operators": len(self.catalog.operators),
            "cases": len(self.catalog.cases),
            "secret_epoch": self.keeper.current.number,
        }


def _job_id() -> str:
    import secrets

    return secrets.token_hex(16)


def _error(
    status: int, error: str, fieldname: str | None, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": error, "field": fieldname, "message": message}, status_code=status, headers=headers)


class BodyLimit:
    """Reads a request's body whole, up to the limit, before the app sees it: 413 past it, 400 when it is not
    UTF-8; the app then gets the buffered body."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.service.max_body
        declared = dict(scope.get("headers") or []).get(b"content-length")
        chunks: list[bytes] = []
        size = 0
        too_big = declared is not None and declared.isdigit() and int(declared) > limit
        while not too_big:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                too_big = True
                break
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        if too_big:
            self.service.metrics.rejected.labels("too_large").inc()
            response = _error(
                413,
                "too_large",
                "body",
                f"the request body is over {limit} bytes (--max-body-mib); send fewer or smaller files",
            )
            await response(scope, receive, send)
            return
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.service.metrics.rejected.labels("bad_request").inc()
            await _error(
                400,
                "bad_request",
                "body",
                f"not UTF-8 (byte {exc.start}): JSON bodies are UTF-8; send binary files in submission.archive",
            )(scope, receive, send)
            return
        # the API takes JSON only: a body sent as a form (curl -d) is read as the JSON it is
        scope["headers"] = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-type"] + [
            (b"content-type", b"application/json")
        ]
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def make_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="cannbench serve",
        version=API_VERSION,
        docs_url=None,
        redoc_url=None,
        description="A warm grading service for CANN Bench submissions (docs/serve.md).",
    )
    metrics = service.metrics

    def authorized(request: Request) -> None:
        if service.token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), service.token.encode()):
            metrics.rejected.labels("unauthorized").inc()
            raise _Unauthorized()

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.monotonic()
        response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "other")
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        metrics.request_seconds.labels(endpoint).observe(time.monotonic() - t0)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first: dict[str, Any] = dict(errors[0]) if errors else {"loc": ("body",), "msg": "invalid", "type": ""}
        metrics.rejected.labels("bad_request").inc()
        if first.get("type") == "json_invalid":
            at = first.get("loc", ("body", "?"))[-1]
            return _error(
                400,
                "bad_request",
                "body",
                f"malformed JSON at character {at}: {first.get('ctx', {}).get('error', first.get('msg'))}",
            )
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        where = ".".join(loc).replace(".[", "[") or "body"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        return _error(422, "bad_request", where, f"{first.get('msg')}{more}")

    @app.exception_handler(BadRequest)
    async def bad(request: Request, exc: BadRequest) -> JSONResponse:
        metrics.rejected.labels("bad_request").inc()
        return _error(exc.status, "bad_request", exc.field, exc.message)

    @app.exception_handler(QueueFull)
    async def full(request: Request, exc: QueueFull) -> JSONResponse:
        metrics.rejected.labels("queue_full").inc()
        return _error(
            429,
            "queue_full",
            None,
            f"the queue holds {service.dispatcher.capacity} candidates and is full; retry after {exc.retry_after} s",
            {"Retry-After": str(exc.retry_after)},
        )

    @app.exception_handler(Draining)
    async def draining(request: Request, exc: Draining) -> JSONResponse:
        metrics.rejected.labels("draining").inc()
        return _error(
            503, "draining", None, "the service is shutting down and takes no new work", {"Retry-After": "30"}
        )

    @app.exception_handler(_Unauthorized)
    async def unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return _error(
            401,
            "unauthorized",
            "Authorization",
            "send the service's token as 'Authorization: Bearer <token>'",
            {"WWW-Authenticate": "Bearer"},
        )

    guarded = [Depends(authorized)]
    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": schema.ErrorAnswer} for code in (400, 401, 403, 413, 422, 429, 503)
    }

    @app.get("/v1/health", response_model=schema.Health, dependencies=guarded, responses=errors)
    async def health() -> dict[str, Any]:
        return service.health()

    @app.post("/v1/grade", response_model=schema.GradeAnswer, dependencies=guarded, responses=errors)
    async def grade(body: schema.GradeRequest) -> dict[str, Any]:
        """Grade one submission; answers when done or at its deadline (then status timeout)."""
        jobs = service.jobs_for(body, [(body.name, body.submission, "submission")])
        service.submit(jobs)
        await jobs[0].done.wait()
        assert jobs[0].answer is not None
        return jobs[0].answer

    @app.post("/v1/jobs", response_model=schema.JobAccepted, status_code=202, dependencies=guarded, responses=errors)
    async def submit_job(body: schema.GradeRequest) -> dict[str, Any]:
        """Queue one submission; poll GET /v1/jobs/{id} for its answer."""
        jobs = service.jobs_for(body, [(body.name, body.submission, "submission")])
        service.submit(jobs)
        return {"id": jobs[0].id, "queue_position": service.dispatcher.position(jobs[0]) or 0}

    @app.get("/v1/jobs/{job_id}", response_model=schema.JobState, dependencies=guarded, responses=errors)
    async def job_state(job_id: str) -> Any:
        job = service.dispatcher.jobs.get(job_id)
        if job is None:
            return _error(404, "not_found", "id", f"no job {job_id[:64]!r} (unknown, or answered long ago)")
        return {
            "id": job.id,
            "state": job.state,
            "queue_position": service.dispatcher.position(job),
            "answer": job.answer,
        }

    @app.post("/v1/batch", response_model=schema.BatchAnswer, dependencies=guarded, responses=errors)
    async def batch(body: schema.BatchRequest) -> dict[str, Any]:
        """Grade a group of candidates on the same cases and inputs: every candidate's answer and pass@k."""
        names: list[str] = []
        for i, cand in enumerate(body.candidates):
            name = cand.name or f"c{i}"
            if name in names:
                raise BadRequest(f"candidates[{i}].name", f"{name!r} names two candidates")
            names.append(name)
        jobs = service.jobs_for(
            body,
            [
                (name, cand.submission, f"candidates[{i}].submission")
                for i, (name, cand) in enumerate(zip(names, body.candidates))
            ],
        )
        service.submit(jobs)
        await wait_all(jobs)
        answers = [job.answer for job in jobs if job.answer is not None]
        common = {**jobs[0].provenance, "judge": None, "node": None}
        return batch_answer(answers, common, sum(goldens_computed(job.outcomes.values()) for job in jobs))

    @app.get("/metrics", dependencies=guarded)
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.add_middleware(BodyLimit, service=service)
    return app


class _Unauthorized(Exception):
    pass


def openapi_schema() -> dict[str, Any]:
    """The API's OpenAPI schema as ``/openapi.json`` serves it (it depends on no server setting)."""
    from pathlib import Path

    metrics = Metrics()
    service = Service(
        catalog=Catalog(Path("tasks"), [], {}),
        dispatcher=Dispatcher([], 1, metrics),
        keeper=SecretKeeper(0),
        metrics=metrics,
        limits=Limits(),
        token=None,
        submissions_root=None,
        guard="block",
        sandbox="auto",
        commit=None,
        max_body=1,
    )
    return make_app(service).openapi()
