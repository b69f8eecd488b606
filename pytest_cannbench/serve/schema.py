"""The service's request and answer bodies as pydantic models: what the OpenAPI schema at ``/openapi.json`` says.

Requests are strict (unknown fields are refused, so a misspelt ``dead_line_s`` is a 422 naming it, never a
default silently used). Answers are described field by field for the schema; the service builds them as plain
dicts (``answer``) and FastAPI checks them against these models on the way out.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FORMATS = ("cann", "kernelbench")
PROFILE_NAMES = ("quick", "standard", "thorough")
SEED_POLICIES = ("secret", "fixed")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Archive(Strict):
    format: Literal["tar.gz", "tar"] = Field("tar.gz", description="the archive's format")
    data: str = Field(description="the archive's bytes, base64 (a submission with binary files: a prebuilt wheel)")


class Submission(Strict):
    """Exactly one of ``files``, ``archive`` or ``path``."""

    files: dict[str, str] | None = Field(
        None,
        description="relative path -> UTF-8 text: a CANN project (build.sh, setup.py, csrc/...) or a "
        "prebuilt-free Python package; no absolute paths, no '..', limits in docs/serve.md",
    )
    archive: Archive | None = Field(None, description="a tar or tar.gz of the submission directory")
    path: str | None = Field(
        None,
        description="a directory on the server, relative to the root it was started with "
        "(--submissions-root); refused when it has none",
    )


class SeedPolicy(Strict):
    policy: Literal["secret", "fixed"] = Field(
        "secret",
        description="secret: inputs drawn under the service's rotating secret (nobody can know them "
        "in advance; the answer carries the epoch's commitment); fixed: the public seed "
        "'value' (reproducible, flagged seed_public)",
    )
    value: int = Field(0, ge=0, lt=2**63, description="the evaluation seed (policy fixed)")


class Options(Strict):
    """What every request of a kind shares: which cases, how hard, by when, under which inputs."""

    format: Literal["cann", "kernelbench"] = Field(
        "cann", description="the submission's format; the server grades the format of its task tree"
    )
    select: str | None = Field(
        None,
        max_length=1000,
        description="a -k style expression over each case's words (operator, path "
        "segments, case id such as 01, dtypes): 'gelu and (01 or 02)'",
    )
    operators: list[str] | None = Field(
        None, max_length=200, description="operators by name or path (gelu, level1/gelu); every one must exist"
    )
    profile: Literal["quick", "standard", "thorough"] = Field(
        "standard", description="trials, timing target and timeouts (docs/serve.md, Profiles)"
    )
    perf: bool = Field(True, description="false: accuracy only (no timing; the reward's range stays [-1, 1])")
    deadline_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="seconds from arrival to answer, queue wait included; past it the "
        "answer is 'timeout' with what was graded (default: the profile's)",
    )
    seed: SeedPolicy = Field(default_factory=lambda: SeedPolicy(policy="secret", value=0))


class GradeRequest(Options):
    submission: Submission
    name: str | None = Field(None, max_length=100, description="a label echoed in the answer")


class Candidate(Strict):
    name: str | None = Field(None, max_length=100, description="the candidate's label (default c<index>)")
    submission: Submission


class BatchRequest(Options):
    candidates: list[Candidate] = Field(
        min_length=1, max_length=256, description="a group of candidates for the same cases (a GRPO group)"
    )


# ------------------------------------------------------------------------------------------------ answers


class CaseAnswer(BaseModel):
    key: str
    operator: str
    case_id: int | None
    status: str = Field(description="passed, failed, timeout, crashed, oom_killed, missing, error, ...")
    code: str | None = Field(description="the stable failure code (outcome.py's failure type); None when passed")
    hint: str | None = Field(description="one line: what to fix")
    message: str = ""
    speedup: float | None = None
    speedup_ci: list[float] | None = Field(None, description="the paired speed-up's 95% interval [low, high]")
    hap: float | None = None
    flags: list[str] = Field(default_factory=list)


class OperatorAnswer(BaseModel):
    rel_path: str
    score: float
    compile: float
    function: float
    performance: float
    cases: int
    passed: int
    score_error: str | None = None
    status: str
    ungraded: bool = Field(False, description="no case of it reached a judge (deadline in the queue, shutdown)")


class Provenance(BaseModel):
    version: str
    commit: str | None
    torch: str | None
    device: str | None
    judge: str | None
    node: str | None
    settings_hash: str
    profile: str
    seed: dict[str, Any]
    guard: str
    sandbox: str | None
    flags: list[str] = Field(default_factory=list)
    helpers: list[str] = Field(
        default_factory=list, description="judges that graded some of its cases beside `judge` (idle judges help)"
    )


class GradeAnswer(BaseModel):
    status: str = Field(
        description="the candidate's worst news: passed, failed, compile_failed, timeout, "
        "crashed, cheating, missing, harness_error (docs/serve.md, Statuses)"
    )
    reward: float | None = Field(
        description="in [-1, 1] (docs/serve.md, Reward); None: harness_error, not the candidate's doing"
    )
    operators: list[OperatorAnswer]
    provenance: Provenance
    name: str | None = None
    id: str
    cases: list[CaseAnswer]
    message: str = ""
    seconds: dict[str, float] = Field(default_factory=dict, description="queued, graded, total")
    attempts: int = 1


class JobAccepted(BaseModel):
    id: str
    queue_position: int = Field(description="jobs ahead of this one (0: next, or running)")


class JobState(BaseModel):
    id: str
    state: Literal["queued", "running", "done"]
    queue_position: int | None
    answer: GradeAnswer | None = None


class PassAtK(BaseModel):
    rel_path: str
    samples: int
    correct: int
    pass_at_k: dict[str, float]


class BatchAnswer(BaseModel):
    status: str = Field(description="done, or timeout when the deadline cut any candidate short")
    reward: list[float | None] = Field(description="every candidate's reward, in request order")
    operators: list[PassAtK] = Field(description="per operator: samples, correct candidates, pass@k")
    provenance: Provenance
    candidates: list[GradeAnswer]
    pass_at_k: dict[str, float]
    goldens_computed: int = Field(description="cases whose golden was computed (not read from a judge's memo)")


class JudgeHealth(BaseModel):
    name: str
    node: str | None
    host: str | None = None
    pid: int | None = Field(None, description="the judge actor's process id on its host")
    device: str | None
    state: str
    busy_s: float
    graded: int
    cpu_slot: int | None = Field(
        None, description="the judge's index on its host: its candidate workers run on that block of CPUs"
    )


class Health(BaseModel):
    status: Literal["ok", "degraded", "draining"]
    version: str
    judges: list[JudgeHealth]
    devices: dict[str, float]
    queue_depth: int
    in_flight: int
    queue_capacity: int
    format: str
    operators: int
    cases: int
    secret_epoch: int


class ErrorAnswer(BaseModel):
    error: str = Field(description="bad_request, unauthorized, too_large, queue_full, not_found, draining")
    field: str | None = Field(None, description="the request field at fault, dotted (submission.files[...])")
    message: str
