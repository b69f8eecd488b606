"""The submission, prepared once per session on the controller: build, install, discover.

``--cann-source DIR`` takes a prebuilt ``dist/cann_bench*.whl`` (and optional
``dist/cann_bench*.run``) as is; otherwise ``bash build.sh`` runs in a private
copy of DIR (so the user's tree is never moved or edited, and a stale wheel
from an earlier build is never picked up) and must leave exactly one wheel.
The wheel is installed with ``pip --no-deps --target`` into the session's
private directory, which only candidate workers put on their path: nothing of
the submission (entry points, ``.pth`` files, ``pytest11`` plugins) ever loads
into pytest. Discovery imports ``cann_bench`` in a candidate worker, never in
the judge. Every failure becomes a :class:`SubmissionState` with a status and
a message that names the log; nothing here raises for a broken submission.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.guard import sandbox
from pytest_cannbench.guard.elf_symbols import scan_libraries, summary
from pytest_cannbench.guard.scan import flags_of, scan_tree, summarize
from pytest_cannbench.outcome import BUILD_OK, COMPILE_FAILED, IMPORT_FAILED, INSTALL_FAILED
from pytest_cannbench.procs import read_log_since
from pytest_cannbench.scratch import make_dir
from pytest_cannbench.submission import wheel_install
from pytest_cannbench.submission.interfaces import validate_names
from pytest_cannbench.submission.jit_build import needs_jit, package_sources, run_jit_build
from pytest_cannbench.workers.candidate_client import CandidateWorker
from pytest_cannbench.workers.candidate_process import WorkerGone
from pytest_cannbench.workers.env_scrub import scrubbed_environment

RUN_TIMEOUT_S = 120.0
COPY_IGNORE = (".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache", "build",
               "dist", "*.egg-info", "reports", ".cannbench-cache")
OPP_VENDOR = "vendors/custom_ops"


@dataclass
class SubmissionState:
    """What the workers need to run the submission, and what the reports say about it (builtins only:
    it travels to xdist workers in ``workerinput``)."""

    status: str
    message: str = ""
    source: str | None = None
    installed: bool = True  # False under --cann-no-install: the user's own cann_bench
    prebuilt: bool = False
    wheel: str | None = None
    wheel_sha256: str | None = None
    run_package: str | None = None
    site_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    interfaces: list[list[str]] = field(default_factory=list)  # [name, source]
    scan: dict[str, Any] = field(default_factory=dict)  # static-scan telemetry of the sources (never a verdict)
    guard_problems: list[list[str]] = field(default_factory=list)  # [kind, detail]: forbidden symbol imports
    build_log: str | None = None
    jit_failures: dict[str, str] = field(default_factory=dict)  # module -> why compiling at import failed
    sample: int | None = None  # a KernelBench generation directory's sample (submission.generations)
    session_dir: str | None = None
    sandbox: dict[str, Any] = field(default_factory=dict)  # guard.sandbox.SandboxChoice.to_dict()
    protect: list[str] = field(default_factory=list)  # what submission code may not see (the judge's paths)
    seconds: dict[str, float] = field(default_factory=dict)
    stale: str = ""  # the prebuilt wheel is older than these sources (--cann-rebuild)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubmissionState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    @property
    def ok(self) -> bool:
        return self.status == BUILD_OK

    @property
    def box(self) -> Box:
        return Box(sandbox.SandboxChoice.from_dict(self.sandbox), tuple(self.protect))


@dataclass(frozen=True)
class Box:
    """Where a stage runs submission code: the session's sandbox choice and the paths hidden from it."""

    choice: sandbox.SandboxChoice
    hidden: tuple[str, ...] = ()

    def wrap(self, cmd: list[str], cwd: Path, writable: tuple[Path, ...] = (),
             readable: tuple[Path, ...] = ()) -> list[str]:
        """``cmd`` as it runs under the sandbox (unchanged when the sandbox is off): ``cwd`` and ``writable``
        read-write, ``readable`` read-only, the system read-only, nothing else."""
        if not self.choice.on or self.choice.bwrap is None:
            return cmd
        return sandbox.command(self.choice.bwrap, cmd, workdir=str(cwd), writable=[str(cwd), *map(str, writable)],
                               readable=[str(p) for p in readable], hidden=self.hidden, pid1=False)


NO_BOX = Box(sandbox.SandboxChoice(mode=sandbox.OFF, requested=sandbox.OFF, reason="trusted stage"))


def _tail(text: str, lines: int = 20, chars: int = 3000) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])[-chars:]


def _file_tail(path: Path, lines: int = 20) -> str:
    return _tail(read_log_since(path, 0, 64 * 1024).decode("utf-8", errors="replace"), lines)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _build_env(work: Path | None = None) -> dict[str, str]:
    """What submission build code sees: the judge's environment scrubbed like a worker's (no CI secrets, no
    pytest state), its interpreter first on PATH (``python`` in build.sh is ours, with torch) and, given the
    session directory, a private HOME there (the user's home is not in the sandbox)."""
    env = scrubbed_environment(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
    env["PYTHON"] = sys.executable
    if work is not None:
        home = work / "home"
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = env["XDG_CACHE_HOME"] = str(home)
        env["PIP_NO_CACHE_DIR"] = "1"
    return env


PROGRESS_S = 15.0  # a build prints how long it has been running this often


def _run(cmd: list[str], cwd: Path, log: Path, timeout: float, env: dict[str, str], box: Box = NO_BOX,
         writable: tuple[Path, ...] = (), readable: tuple[Path, ...] = (),
         progress: Callable[[float], None] | None = None) -> tuple[int | None, float]:
    """Run ``cmd`` in its own process group (inside ``box``'s sandbox), output appended to ``log``; rc None on
    timeout (group killed). ``progress(elapsed)`` is called every :data:`PROGRESS_S` seconds while it runs."""
    t0 = time.perf_counter()
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(cmd)}   (in {cwd}{', sandboxed' if box.choice.on else ''})\n".encode())
        out.flush()
        proc = subprocess.Popen(box.wrap(cmd, cwd, writable, readable), cwd=str(cwd), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        rc: int | None = None
        try:
            while True:
                left = timeout - (time.perf_counter() - t0)
                try:
                    rc = proc.wait(timeout=max(0.0, min(left, PROGRESS_S)))
                    break
                except subprocess.TimeoutExpired:
                    if left <= PROGRESS_S:
                        raise
                    if progress is not None:
                        progress(time.perf_counter() - t0)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            rc = None
        except BaseException:  # Ctrl-C: do not leave a compiler running
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            raise
    return rc, time.perf_counter() - t0


def stale_sources(source: Path, wheel: Path) -> list[str]:
    """Files of the source tree modified after the prebuilt ``wheel`` (build outputs and VCS data left out):
    in an edit-and-grade loop a stale wheel would silently win over the changed sources."""
    try:
        built = wheel.stat().st_mtime
    except OSError:
        return []
    newer = []
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, pattern) for pattern in COPY_IGNORE)]
        for name in files:
            path = Path(root) / name
            try:
                if path.stat().st_mtime > built:
                    newer.append(path.relative_to(source).as_posix())
            except OSError:
                continue
    return sorted(newer)


def _packages(dist: Path) -> tuple[list[Path], list[Path]]:
    if not dist.is_dir():
        return [], []
    return sorted(dist.glob("cann_bench*.whl")), sorted(dist.glob("cann_bench*.run"))


def build(source: Path, state: SubmissionState, work: Path, log: Path, timeout: float, *, rebuild: bool = False,
          announce: Callable[[str], None] | None = None) -> tuple[Path, ...] | None:
    """The wheel (and .run) to install, building when there is no prebuilt one (or ``rebuild``, which ignores
    it); None on failure (state says why)."""
    wheels, runs = _packages(source / "dist")
    if rebuild and (source / "build.sh").is_file():
        wheels, runs = [], []
    if len(wheels) > 1 or len(runs) > 1:
        names = ", ".join(p.name for p in wheels + runs)
        state.status, state.message = COMPILE_FAILED, (f"{source / 'dist'} holds several packages ({names}); "
                                                       "keep exactly one cann_bench wheel (and at most one .run)")
        return None
    if wheels:
        state.prebuilt = True
        newer = stale_sources(source, wheels[0]) if (source / "build.sh").is_file() else []
        if newer:
            more = f" and {len(newer) - 3} more" if len(newer) > 3 else ""
            state.stale = (f"{', '.join(newer[:3])}{more} changed after {wheels[0].name} was built; grading the "
                           "prebuilt wheel anyway: set cann_rebuild (-o cann_rebuild=true) to build from build.sh")
        return (wheels[0], *runs)
    if not (source / "build.sh").is_file():
        state.status, state.message = COMPILE_FAILED, (
            f"{source} has neither dist/cann_bench*.whl nor build.sh: add a build.sh that leaves one "
            "cann_bench wheel in dist/, or put a prebuilt wheel there")
        return None
    copy = work / "source"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(*COPY_IGNORE), ignore_dangling_symlinks=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    state.build_log = str(log)
    env = _build_env(work)
    say = announce or (lambda line: None)
    say(f"cannbench: building {source} (build.sh{', sandboxed' if state.box.choice.on else ''}; log {log}) ...")
    rc, seconds = _run(["bash", "build.sh"], copy, log, timeout, env, state.box, writable=(Path(env["HOME"]),),
                       progress=lambda elapsed: say(f"cannbench: still building, {elapsed:.0f} s"))
    state.seconds["build"] = round(seconds, 3)
    say(f"cannbench: build.sh {'finished' if rc == 0 else 'failed'} in {seconds:.1f} s")
    if rc != 0:
        why = (f"build.sh did not finish within {timeout:g} s (cann_build_timeout) and was killed" if rc is None
               else f"build.sh exited with code {rc} after {seconds:.1f} s")
        state.status, state.message = COMPILE_FAILED, f"{why}; log {log}\n{_file_tail(log)}"
        return None
    wheels, runs = _packages(copy / "dist")
    others = sorted(p.name for p in (copy / "dist").glob("*.whl")) if (copy / "dist").is_dir() else []
    if len(wheels) != 1 or len(runs) > 1:
        found = ", ".join(others) or "nothing"
        state.status, state.message = COMPILE_FAILED, (f"build.sh succeeded but left {found} in dist/; it must "
                                                       f"leave exactly one cann_bench*.whl; log {log}")
        return None
    return (wheels[0], *runs)


def _env_after(script: Path, env: dict[str, str], box: Box, readable: tuple[Path, ...]) -> dict[str, str]:
    """Variables that sourcing ``script`` (the submission's) sets or changes, as bash computes them in the
    sandbox."""
    code = f'source "{script}" >/dev/null 2>&1; env -0'
    cwd = script.parent

    def run(argv: list[str]) -> bytes:
        return subprocess.run(box.wrap(argv, cwd, readable=readable), capture_output=True, env=env, timeout=30,
                              cwd=str(cwd)).stdout

    before, after = run(["bash", "-c", "env -0"]), run(["bash", "-c", code])

    def parse(raw: bytes) -> dict[str, str]:
        out = {}
        for item in raw.split(b"\0"):
            if b"=" in item:
                k, v = item.split(b"=", 1)
                out[k.decode(errors="replace")] = v.decode(errors="replace")
        return out

    old, new = parse(before), parse(after)
    return {k: v for k, v in new.items() if old.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def _prepend(env: dict[str, str], key: str, paths: list[str]) -> None:
    current = [p for p in env.get(key, os.environ.get(key, "")).split(os.pathsep) if p]
    env[key] = os.pathsep.join([p for p in paths if p not in current] + current)


def install_run(run: Path, state: SubmissionState, work: Path, log: Path) -> bool:
    """A custom-OPP ``.run`` into a private prefix (in the sandbox: it is the submission's code); its
    environment is kept for the workers only."""
    prefix = work / "opp"
    prefix.mkdir(parents=True, exist_ok=True)
    env, box = _build_env(work), state.box
    rw, ro = (prefix, Path(env["HOME"])), (run.parent,)
    rc, _ = _run(["bash", str(run), "--quiet", f"--install-path={prefix}"], work, log, RUN_TIMEOUT_S, env, box,
                 rw, ro)
    if rc != 0:
        helped = subprocess.run(box.wrap(["bash", str(run), "--help"], work, rw, ro), capture_output=True,
                                timeout=10, env=env, cwd=str(work))
        if b"--force" in helped.stdout + helped.stderr:
            rc, _ = _run(["bash", str(run), "--quiet", "--force", f"--install-path={prefix}"], work, log,
                         RUN_TIMEOUT_S, env, box, rw, ro)
    if rc != 0:
        why = "timed out" if rc is None else f"exited with code {rc}"
        state.status, state.message = INSTALL_FAILED, f"installing {run.name} {why}; log {log}\n{_file_tail(log)}"
        return False
    vendor = prefix / OPP_VENDOR
    set_env = vendor / "bin" / "set_env.bash"
    extra = _env_after(set_env, env, box, (prefix,)) if set_env.is_file() else {}
    _prepend(extra, "ASCEND_CUSTOM_OPP_PATH", [str(vendor)])
    libs = [vendor / "op_api" / "lib", vendor / "op_impl" / "ai_core" / "tbe" / "op_tiling"]
    _prepend(extra, "LD_LIBRARY_PATH", [str(p) for p in libs if p.is_dir()])
    state.env.update(extra)
    return True


def install_wheel(wheel: Path, state: SubmissionState, work: Path, log: Path) -> bool:
    """The wheel into the candidate's private site directory (:mod:`wheel_install`: no code of it runs)."""
    site = work / "site"
    t0 = time.perf_counter()
    try:
        count = wheel_install.install(wheel, site, work / "wheel-data")
    except wheel_install.WheelRefused as exc:
        with open(log, "a") as fh:
            fh.write(f"{exc}\n")
        state.status, state.message = INSTALL_FAILED, f"{exc}; log {log}"
        return False
    finally:
        state.seconds["install"] = round(time.perf_counter() - t0, 3)
    with open(log, "a") as fh:
        fh.write(f"installed {wheel.name} into {site} ({count} archive members)\n")
    state.site_dir = str(site)
    return True


def check_symbols(state: SubmissionState) -> None:
    """The private install's ELF files, whatever their names, may import from torch only what a kernel library
    needs (guard/torch_imports.py) and no other math library (elf_symbols): a verdict for every case in block mode,
    flags in warn mode; an ELF file it cannot read counts the same. Cases see one line per library and reason."""
    if not state.site_dir:
        return
    problems, unreadable = scan_libraries(Path(state.site_dir))
    state.guard_problems = [["builtin_compute", line] for line in summary(problems)[:10]]
    # what cannot be read cannot be vetted: refused in block mode, a flag in warn mode (guard.policy)
    state.guard_problems += [["builtin_compute", f"an ELF file the symbol scan cannot read: {u}"]
                             for u in unreadable[:5]]
    state.scan["symbols"] = {"problems": [p.detail() for p in problems[:50]], "unreadable": unreadable[:20]}


def discover(state: SubmissionState, log_dir: Path, work: Path, guard: str = "block",
             worker: CandidateWorker | None = None) -> None:
    """Import the submission in a candidate worker and list its interfaces (validated: it ran their code).
    ``worker``: the judge's own worker of this candidate, left running for its cases (a judge in the same process
    as the build spares one start); otherwise a worker of its own, closed after."""
    box = state.box
    own = worker is None
    if worker is None:
        worker = CandidateWorker(log_path=log_dir / "discovery.log", workdir=work / "discovery", mode="submission",
                                 site_dir=state.site_dir, env=dict(state.env), guard=guard, protect=list(box.hidden),
                                 sandbox=box.choice,
                                 readable=[str(work), *([] if state.installed else sandbox.user_python_path())])
    t0 = time.perf_counter()
    try:
        if own:
            worker.start()
        raw = worker.discover()
        state.interfaces = [[i.name, i.source] for i in validate_names(raw)]
    except WorkerGone as exc:
        state.status, state.message = IMPORT_FAILED, f"{exc}\n(log {worker.log_path})"
    except ValueError as exc:
        state.status, state.message = IMPORT_FAILED, f"interface discovery failed: {exc}"
    finally:
        if own:
            worker.close()
    state.seconds["discover"] = round(time.perf_counter() - t0, 3)


def prepare(source: str | None, *, no_install: bool, report_dir: Path, build_timeout: float,
            guard: str = "block", box: Box = NO_BOX, rebuild: bool = False,
            announce: Callable[[str], None] | None = None, discovery: bool = True,
            session: Path | None = None) -> SubmissionState:
    """Build, install and discover the submission, each inside ``box``; the returned state holds a private
    session directory that :func:`cleanup` removes. ``discovery=False``: the caller discovers it in the worker
    that will grade it (:func:`discover` with ``worker``). ``session``: the private directory to build into, made
    by the caller (a spare worker already shows it); made here otherwise."""
    work = session if session is not None else make_dir("session")
    log_dir = report_dir / "logs"
    state = SubmissionState(status=BUILD_OK, source=source, installed=not no_install, session_dir=str(work),
                            sandbox=box.choice.to_dict(), protect=list(box.hidden))
    if source:
        state.scan = scan_summary(Path(source))
    if not no_install:
        assert source is not None
        packages = build(Path(source), state, work, log_dir / "build.log", build_timeout, rebuild=rebuild,
                         announce=announce)
        if packages is None:
            return state
        wheel, *runs = packages
        state.wheel, state.wheel_sha256 = wheel.name, _sha256(wheel)
        install_log = log_dir / "install.log"
        install_log.parent.mkdir(parents=True, exist_ok=True)
        install_log.write_bytes(b"")
        if runs:
            state.run_package = runs[0].name
            if not install_run(runs[0], state, work, install_log):
                return state
        if not install_wheel(wheel, state, work, install_log):
            return state
        if not jit_build_package(state, work, log_dir, build_timeout):
            return state
        check_symbols(state)
    if discovery:
        discover(state, log_dir, work, guard)
    return state


def jit_build_package(state: SubmissionState, work: Path, log_dir: Path, timeout: float) -> bool:
    """A ``cann_bench`` that compiles at import (``load_inline``) is compiled here, in the build stage
    (:mod:`jit_build`); False (``compile_failed``) when its import fails there."""
    site = Path(state.site_dir or "")
    if not state.site_dir or not needs_jit(package_sources(site)):
        return True
    jit = run_jit_build(site, work, log_dir, timeout, runner=functools.partial(_run, box=state.box),
                        env=_build_env(work), packages=("cann_bench",))
    state.seconds["jit_build"] = jit.seconds
    if jit.failures:
        state.status, state.message = COMPILE_FAILED, jit.failures["cann_bench"]
        return False
    state.env.update(jit.env())
    return True


def scan_summary(source: Path) -> dict[str, Any]:
    """Suspicious constructs in the submission's sources (guard.scan): flags for the leaderboard, never a verdict."""
    try:
        hits = scan_tree(source)
    except OSError as exc:
        return {"error": str(exc)}
    return {"flags": flags_of(hits), "counts": summarize(hits),
            "hits": [{"rule": h.rule, "path": h.path, "line": h.line, "snippet": h.snippet} for h in hits[:50]]}


def cleanup(state: SubmissionState) -> None:
    if state.session_dir:
        shutil.rmtree(state.session_dir, ignore_errors=True)


def header_lines(state: SubmissionState) -> list[str]:
    """The terminal header's account of the submission (printed once, by the controller)."""
    what = state.source or "the installed cann_bench (--cann-source @installed)"
    if state.wheel:
        how = "prebuilt" if state.prebuilt else f"built in {state.seconds.get('build', 0):.1f} s"
        what += f"; wheel {state.wheel} ({how}, sha256 {state.wheel_sha256[:12]})" if state.wheel_sha256 else ""
    if state.run_package:
        what += f"; OPP package {state.run_package}"
    lines = [f"cannbench: submission {what}"]
    if state.stale:
        lines.append(f"cannbench: WARNING: {state.stale}")
    if state.scan.get("counts"):
        found = ", ".join(f"{rule} x{n}" for rule, n in sorted(state.scan["counts"].items()))
        lines.append(f"cannbench: static scan (telemetry, not a verdict): {found}")
    if not state.ok:
        first = state.message.splitlines()[0] if state.message else ""
        lines.append(f"cannbench: SUBMISSION {state.status.upper()}: {first} - every case fails as {state.status}")
        return lines
    names = ", ".join(f"{n}" + ("" if src == "torch.ops+module" else f" ({src})") for n, src in state.interfaces)
    lines.append(f"cannbench: {len(state.interfaces)} interfaces discovered: {names or 'none'}")
    return lines
