"""``cannbench serve``: start Ray (an embedded local cluster, or ``--address`` to join one), the judges, and the
HTTP front; drain on SIGTERM/SIGINT.

Judges: one per card (Ray's ``GPU`` resource on CUDA hosts, its ``NPU`` resource on Ascend hosts, 2 CPUs each by
default), else one per ``--judge-cpus`` cores (default 1: a warm judge runs one candidate at a time, its golden
worker idle once its cases' goldens are known, its workers on a CPU of their own), at least one;
``--judges N`` says how many. Each is a Ray actor asking for those resources (plus ``--judge-resources``, JSON,
for custom ones), placed with Ray's SPREAD strategy, restarted by Ray when it dies (``max_restarts``).

It listens on 127.0.0.1 unless told otherwise; any other address needs a token (``--token-file`` or
``$CANNBENCH_SERVE_TOKEN``): the service runs code from whoever can reach it. It prints
``cannbench serve: listening on http://HOST:PORT`` once its judges are warm (``--port 0``: a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_cannbench.kernelbench.spec import is_problem
from pytest_cannbench.serve.catalog import Catalog
from pytest_cannbench.serve.intake import Limits
from pytest_cannbench.serve.judge import JudgeCore
from pytest_cannbench.serve.profiles import PROFILES, overrides_for
from pytest_cannbench.serve.rotation import SecretKeeper

LOOPBACK = ("127.0.0.1", "::1", "localhost")
_MADE: list[str] = []  # directories this process made (Ray's temp dir, the judges' work dir): removed at the end


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", default="tasks", help="the task tree to grade (default tasks/)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs a token)"
    )
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one)")
    parser.add_argument(
        "--token-file",
        default=None,
        help="file holding the bearer token clients must send (default: $CANNBENCH_SERVE_TOKEN)",
    )
    parser.add_argument("--address", default=None, help="join this Ray cluster (default: start a local one)")
    parser.add_argument(
        "--judges",
        type=int,
        default=None,
        help="how many judges (default: one per card, else the cores / --judge-cpus)",
    )
    parser.add_argument(
        "--judge-cpus",
        type=float,
        default=None,
        help="Ray CPUs per judge (default: 1 on CPU hosts, 2 beside each card)",
    )
    parser.add_argument(
        "--judge-resources", default=None, help="extra Ray resources per judge, JSON (e.g. '{\"grader\": 1}')"
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda", "npu"),
        help="what judges grade on (default auto: NPU, else GPU, else CPU, from the cluster)",
    )
    parser.add_argument(
        "--queue-size", type=int, default=64, help="candidates that may wait (default 64; past it: 429)"
    )
    parser.add_argument(
        "--submissions-root", default=None, help="allow submission.path: directories under this root (default: refused)"
    )
    parser.add_argument("--max-body-mib", type=float, default=32.0, help="largest request body (default 32 MiB)")
    parser.add_argument("--max-files", type=int, default=512, help="files per submission (default 512)")
    parser.add_argument("--max-file-mib", type=float, default=4.0, help="bytes per file (default 4 MiB)")
    parser.add_argument(
        "--max-submission-mib", type=float, default=16.0, help="bytes per submission, unpacked (default 16 MiB)"
    )
    parser.add_argument(
        "--guard",
        default="block",
        choices=("block", "warn", "off"),
        help="the anti-cheat guard (default block; others flag every answer)",
    )
    parser.add_argument(
        "--sandbox",
        default="auto",
        choices=("auto", "bwrap", "off"),
        help="the OS sandbox around submission code (default auto)",
    )
    parser.add_argument(
        "--secret-rotate",
        type=float,
        default=3600.0,
        help="seconds between input-secret rotations (default 3600; docs/serve.md, Trust)",
    )
    parser.add_argument(
        "--reveal-secrets",
        default=None,
        help="directory where each retired epoch's secret is written (0600) once unused",
    )
    parser.add_argument("--work-dir", default=None, help="judges' private directories (default: a temp dir)")
    parser.add_argument(
        "--golden-cache",
        default=None,
        help="an on-disk golden cache shared by this host's judges (default: none; each judge keeps "
        "its goldens in memory per secret epoch)",
    )
    parser.add_argument(
        "--golden-memo",
        type=int,
        default=64,
        help="goldens each grader keeps in memory for the next candidates (default 64: one "
        "operator's cases, both correctness passes; each holds a case's fp64 golden, native "
        "reference and inputs)",
    )
    parser.add_argument(
        "--case-timeout",
        type=float,
        default=None,
        help="cap every profile's case timeout at SEC (e.g. for short RL rewards)",
    )
    parser.add_argument("--build-timeout", type=float, default=None, help="cap every profile's build timeout at SEC")
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="seconds to finish queued and running work on shutdown (default 600)",
    )
    parser.add_argument(
        "--warm",
        action="append",
        metavar="PROFILE[:accuracy]",
        default=None,
        help="open a grader of this profile on every judge before listening, so its first requests "
        "are warm (repeatable; default standard; ':accuracy' for perf false)",
    )
    parser.add_argument("--no-warm", action="store_true", help="open no grader before listening")


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        return Path(args.token_file).read_text().strip() or None
    return os.environ.get("CANNBENCH_SERVE_TOKEN") or None


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def _say(message: str) -> None:
    print(f"cannbench serve: {message}", file=sys.stderr, flush=True)


def _judge_plan(args: argparse.Namespace, resources: dict[str, float]) -> tuple[str, int, dict[str, Any]]:
    """(device, count, ray options) of the judges, from the cluster's resources."""
    device = args.device
    if device == "auto":
        device = "npu" if resources.get("NPU") else "cuda" if resources.get("GPU") else "cpu"
    extra = json.loads(args.judge_resources) if args.judge_resources else {}
    if not isinstance(extra, dict):
        raise ValueError("--judge-resources: expected a JSON object of resource names and amounts")
    cpus = args.judge_cpus if args.judge_cpus is not None else (1.0 if device == "cpu" else 2.0)
    options: dict[str, Any] = {"num_cpus": cpus, "resources": dict(extra)}
    if device == "cuda":
        options["num_gpus"] = 1
        count = int(resources.get("GPU", 0))
    elif device == "npu":
        options["resources"]["NPU"] = 1
        count = int(resources.get("NPU", 0))
    else:
        count = int(resources.get("CPU", 1) // max(cpus, 0.01))
    return device, max(1, args.judges if args.judges is not None else count), options


def run(args: argparse.Namespace) -> int:
    token = _token(args)
    if not _is_loopback(args.host) and not token:
        _say(
            f"error: --host {args.host} is not a loopback address: the service runs submitted code, so it needs a "
            "token (--token-file FILE or $CANNBENCH_SERVE_TOKEN) that clients send as 'Authorization: Bearer'"
        )
        return 2
    tasks = Path(args.tasks).resolve()
    catalog = Catalog.read(tasks)
    if not catalog.cases:
        kernelbench = tasks.is_dir() and any(is_problem(p, "auto") for p in tasks.rglob("*.py"))
        _say(
            f"error: {tasks}: no CANN-format operator (proto.yaml, cases.yaml, golden.py) to grade"
            + ("; it holds KernelBench problems, which the service does not grade yet" if kernelbench else "")
        )
        return 2
    if args.submissions_root and not Path(args.submissions_root).is_dir():
        _say(f"error: --submissions-root {args.submissions_root}: not a directory")
        return 2
    bad = [
        w for w in args.warm or [] if w.partition(":")[0] not in PROFILES or w.partition(":")[2] not in ("", "accuracy")
    ]
    if bad:
        _say(f"error: --warm {bad[0]}: expected a profile ({', '.join(PROFILES)}), optionally with ':accuracy'")
        return 2
    if args.reveal_secrets and not Path(args.reveal_secrets).is_dir():
        _say(f"error: --reveal-secrets {args.reveal_secrets}: not a directory")
        return 2
    try:
        return asyncio.run(_serve(args, catalog, token))
    except KeyboardInterrupt:
        return 130


def _start_ray(args: argparse.Namespace) -> Any:
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
        _say(f"joined the Ray cluster at {args.address}")
    else:
        temp = tempfile.mkdtemp(prefix="cbray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        ray.init(include_dashboard=False, log_to_driver=False, object_store_memory=128 * 2**20, _temp_dir=temp)
        _MADE.append(temp)
        _say(f"started a local Ray cluster (its logs in {temp}, removed at a clean stop)")
    return ray


def _unplaceable(count: int, options: dict[str, Any], resources: dict[str, float]) -> str:
    """Why ``count`` judges asking ``options`` cannot all be placed on the cluster's resources now ("" if they
    can); named with the options that change it."""
    asks = {"CPU": float(options.get("num_cpus") or 0), "GPU": float(options.get("num_gpus") or 0)}
    asks.update({k: float(v) for k, v in (options.get("resources") or {}).items() if k in ("NPU",)})
    for name, each in asks.items():
        have = resources.get(name, 0.0)
        if each and count * each > have + 1e-9:
            return (
                f"{count} judges x {each:g} {name} need {count * each:g} {name}, and the cluster has {have:g}: "
                f"lower --judges or --judge-cpus, or add nodes (--address)"
            )
    return ""


async def _serve(args: argparse.Namespace, catalog: Any, token: str | None) -> int:
    import uvicorn

    from pytest_cannbench.serve.app import Service, make_app  # the serve extra: fastapi, pydantic
    from pytest_cannbench.serve.dispatch import Dispatcher, JudgeHandle  # the serve extra: prometheus_client
    from pytest_cannbench.serve.metrics import Metrics  # the serve extra: prometheus_client

    ray = _start_ray(args)
    resources = {k: float(v) for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU", "NPU")}
    device, count, options = _judge_plan(args, resources)
    short = _unplaceable(count, options, resources)
    if short:
        # Ray would keep the judges it cannot place pending, and the service would wait for them without a word
        _say(f"error: {short}")
        ray.shutdown()
        return 2
    work = args.work_dir or tempfile.mkdtemp(prefix="cannbench-serve-")
    if not args.work_dir:
        _MADE.append(work)
    golden_cache = os.path.abspath(args.golden_cache) if args.golden_cache else None
    actor_class = ray.remote(max_restarts=-1, max_task_retries=0, scheduling_strategy="SPREAD", **options)(JudgeCore)
    judges = []
    for i in range(count):
        config = {
            "name": f"judge-{i}",
            "tasks": str(catalog.tasks),
            "guard": args.guard,
            "sandbox": args.sandbox,
            "device": None if device == "cpu" and args.device == "auto" else device,
            "work_dir": work,
            "golden_cache": golden_cache,
            "golden_memo": args.golden_memo,
        }
        judges.append(JudgeHandle(config["name"], actor_class.remote(config)))
    keeper = SecretKeeper(args.secret_rotate, args.reveal_secrets)
    caps = {
        k: v
        for k, v in (("case_timeout_s", args.case_timeout), ("build_timeout_s", args.build_timeout))
        if v is not None
    }
    for spec in [] if args.no_warm else args.warm or ["standard"]:
        profile, _, mode = spec.partition(":")
        warm = overrides_for(
            profile, perf=mode != "accuracy", policy="secret", value=0, secret=keeper.current.secret, caps=caps
        )
        infos = await asyncio.gather(*(j.actor.warm.remote(warm) for j in judges), return_exceptions=True)
        for judge, info in zip(judges, infos):
            if isinstance(info, BaseException):
                _say(f"error: {judge.name} could not start: {str(info).strip().splitlines()[-1]}")
                ray.shutdown()
                return 2
            judge.info, judge.state = info, "ready"
    metrics = Metrics()
    dispatcher = Dispatcher(judges, args.queue_size, metrics)
    limits = Limits(
        max_files=args.max_files,
        max_file_bytes=int(args.max_file_mib * 2**20),
        max_total_bytes=int(args.max_submission_mib * 2**20),
    )
    service = Service(
        catalog=catalog,
        dispatcher=dispatcher,
        keeper=keeper,
        metrics=metrics,
        limits=limits,
        token=token,
        submissions_root=args.submissions_root,
        guard=args.guard,
        sandbox=args.sandbox,
        commit=_commit(),
        max_body=int(args.max_body_mib * 2**20),
        devices=resources,
        caps=caps,
    )
    app = make_app(service)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)  # before the URL is printed: a client that connects at once waits in the backlog
    port = sock.getsockname()[1]
    server = _server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=30),
        dispatcher,
        args.drain_timeout,
    )
    dispatcher.start()
    host = f"[{args.host}]" if ":" in args.host else args.host
    _say(
        f"{count} judges ({device}; {', '.join(f'{k} {v:g}' for k, v in resources.items())}), "
        f"{len(catalog.cases)} cases of {len(catalog.operators)} operators in {catalog.tasks}"
        + ("" if token is None else "; a bearer token is required")
    )
    print(f"cannbench serve: listening on http://{host}:{port}", flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        await dispatcher.stop()
        keeper.close()
        # a judge lost with its node never answers: only live ones are asked to clean up, within a bound
        await asyncio.gather(
            *(
                asyncio.wait_for(_awaited(j.actor.shutdown.remote()), 30)
                for j in judges
                if j.state in ("ready", "busy")
            ),
            return_exceptions=True,
        )
        ray.shutdown()
        for made in _MADE:
            shutil.rmtree(made, ignore_errors=True)
        _say("stopped")
    return 0


async def _awaited(ref: Any) -> Any:
    return await ref


def _server(config: Any, dispatcher: Any, drain_timeout: float) -> Any:
    """uvicorn's server with a drain first: the first SIGTERM/SIGINT stops new work (503) and lets queued and
    running jobs finish (pollers still get their answers), then stops the HTTP server; a second one stops now."""
    import uvicorn

    class Server(uvicorn.Server):
        signals = 0

        def handle_exit(self, sig: int, frame: Any) -> None:  # called by signal.signal, in the main thread
            self.signals += 1
            if self.signals > 1:
                _say("stopping now (second signal)")
                self.force_exit = True
                self.should_exit = True
                return
            _say(
                f"draining: no new work; finishing {len(dispatcher.pending)} queued and "
                f"{len(dispatcher.running)} running candidates (at most {drain_timeout:g} s)"
            )
            asyncio.get_event_loop().call_soon_threadsafe(lambda: asyncio.ensure_future(self.drain()))

        async def drain(self) -> None:
            if not await dispatcher.drain(drain_timeout):
                _say("drain timeout: answering what is left as not graded")
            await asyncio.sleep(1.0)  # a poller that just saw 'running' gets its answer
            self.should_exit = True

    return Server(config)
