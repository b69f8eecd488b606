"""Every setting of a run, declared once: the field, its default, how the user gives it and what it means for a run.

Options are prefixed ``--cann-`` and ini keys ``cann_`` so the plugin never clashes with another one (it loads in
every pytest run of the environment). Hooks read a :class:`Settings` from ``config.stash`` instead of calling
``getoption`` all over the place. ``results=True``: a case's recorded outcome depends on it, so it is part of the
``--cann-resume`` identity and ``cannbench merge`` requires it to match; ``per_job=True``: it may differ between the
jobs of one sharded run (paths, the machine's memory, run-time decisions).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from pytest_cannbench.options import specs
from pytest_cannbench.options import values as v
from pytest_cannbench.options.declare import declaration_of, derived, internal, setting
from pytest_cannbench.options.defaults import (
    BENCHES,
    CUDA_GRAPH_MODES,
    DEFAULT_BUILD_TIMEOUT_S,
    DEFAULT_CASE_TIMEOUT_S,
    DEFAULT_GOLDEN_CACHE,
    DEFAULT_GOLDEN_TIMEOUT_S,
    DEFAULT_HAP_TARGET,
    DEFAULT_KB_TRIALS,
    DEFAULT_MAX_GIB,
    DEFAULT_MIN_FREE_GIB,
    DEFAULT_REPEAT,
    DEFAULT_REPEAT_MAX,
    DEFAULT_REPORT_DIR,
    DEFAULT_TIMING_BUDGET_S,
    DEFAULT_TIMING_TARGET_PCT,
    DEFAULT_WARMUP,
    DISPATCH_MODES,
    GOLDEN_PRECISIONS,
    INPUT_COMPAT_MODES,
    INPUT_DISTS,
    ISOLATION_MODES,
    MIN_GOLDEN_MEMORY_GIB,
    PROFILER_LEVELS,
    SANDBOX_MODES,
)

# what a run grades, and where
_TASKS = "task tree to collect when pytest is given no paths (a bench root such as tasks/, a level directory or one " \
         "operator directory)."
_SOURCE = "what to grade: a submission directory with a prebuilt dist/cann_bench*.whl (plus an optional " \
          "dist/cann_bench*.run) or a build.sh that makes one, built and installed once per session, privately " \
          "(repeat it to grade several submissions in one session; a KernelBench generation directory is one " \
          "candidate per sample); @golden: the goldens themselves, computed in each case's native dtype, as the " \
          "candidate (how task authors validate a task tree); @installed: the cann_bench package already " \
          "installed in this environment (no build, no install)."
_BENCH = "benchmark format: auto (default: detected from the files), cann (proto.yaml/cases.yaml operators) or " \
         "stanford (KernelBench problem files with Model/get_inputs/get_init_inputs)."
_REPORT_DIR = f"directory for logs and reports, leaderboard.json and results.jsonl among them (default " \
              f"{DEFAULT_REPORT_DIR}/ under the rootdir)."
_DEVICE = "device the candidate runs and is timed on (default auto: an NPU, else a CUDA GPU, else the CPU), with " \
          "the ids to use after a colon (cuda:0,1; default all: every card CUDA_VISIBLE_DEVICES/" \
          "ASCEND_RT_VISIBLE_DEVICES names, else every card of the host); xdist worker gwK uses ids[K % len(ids)]."
_HARDWARE = "anchor hardware key for metadata/<KEY>.json (default: from the device; the CPU and most GPUs have no " \
            "metadata and get live anchors)."
# timing
_NO_PERF = "accuracy only: no timing (cases are 'not measured', never zero time)."
_WARMUP = f"untimed calls before timing (default {DEFAULT_WARMUP})."
_REPEAT = f"timed calls per case, each on fresh inputs and verified: a count; auto (default), at least " \
          f"{DEFAULT_REPEAT} and at most {DEFAULT_REPEAT_MAX}, until the speed-up's interval is within " \
          f"--cann-timing-target, the HAP's within cann_hap_target, or cann_timing_budget is spent; or MIN..MAX, " \
          f"auto between other bounds."
_TIMING_TARGET = f"--cann-repeat auto: stop once the 95% interval of the paired speed-up is within +-PCT% of it " \
                 f"(default {DEFAULT_TIMING_TARGET_PCT:g})."
_HAP_TARGET = f"--cann-repeat auto: also stop once the 95% interval of the case's HAP score is within +-H (HAP " \
              f"runs 0..1; default {DEFAULT_HAP_TARGET:g}; 0: the speed-up target alone)."
_TIMING_BUDGET = f"--cann-repeat auto: seconds of a case's timing work (its sets' references, windows and verdicts; " \
                 f"not waiting for other workers' windows) after which it adds no more sets; the minimum count is " \
                 f"always timed (default {DEFAULT_TIMING_BUDGET_S:g})."
_TIMING_THREADS = "intra-op threads of the candidate and baseline workers, for their correctness and timed calls, " \
                  "whatever -n is (default 1; all: every usable core, which the quiet-window fence gives a timed " \
                  "window). Goldens and comparisons keep each process's share of the cores."
_TIMING_ISOLATION = "fence (default): while a case is timed, the session's other xdist workers hold off their " \
                    "accuracy work (goldens, candidate calls, comparisons); off lets them run alongside."
_CUDA_GRAPH = "CUDA only: time replays of the call captured in a CUDA graph, the L2 clear captured apart and " \
              "subtracted (on), only for launch-bound calls whose eager median is under 50 us (auto), or never " \
              "(off, default: not yet run on hardware). Falls back to eager timing, with a note, when the call " \
              "cannot be captured."
_NO_FREQ_BOOST = "NPU: skip the frequency-boost warm-up kernel before timing."
_PROFILER = "NPU profiler level (default Level1)."
# judging
_SEED = "evaluation seed mixed into every case seed (default 0, as the official harness). Grading a submission " \
        "without it mixes in a per-session secret as well, so inputs cannot be known in advance; give it to " \
        "reproduce a run exactly."
_CHECKER = "accuracy checker: relative_error (the CANN precision standard; KernelBench problems against a float64 " \
           "run of their reference), allclose (KernelBench problems at KernelBench's own tolerances) or " \
           "kernelbench (KernelBench problems by KernelBench's rule, allclose atol=rtol=1e-4 fp32, 1e-2 " \
           "fp16/bf16 against the reference in the same precision; CANN tasks keep relative_error). Default: " \
           "relative_error for CANN tasks, kernelbench for KernelBench problems."
_GUARD = "anti-cheat guard for submissions: block (default) fails a case that delegates to builtin compute, loads " \
         "host libraries or tampers with timing, KernelBench problems under the coverage rule (a custom kernel " \
         "must run in forward and do most of its work, docs/kernelbench.md); kernelbench: block, KernelBench " \
         "problems under KernelBench's rule alone; strict: block for every format (any builtin compute of a " \
         "KernelBench ModelNew fails); warn records what it catches as a flag; off skips those checks " \
         "(containment and the output contract always apply)."
_SANDBOX = "OS sandbox around submission code (build.sh, discovery, the candidate worker): auto (default) uses " \
           "bubblewrap where it works and otherwise says loudly that it runs without one; bwrap requires it; off " \
           "runs with in-process containment only (every case flagged sandbox_off)."
_INPUT_DIST = "distribution of generated float inputs inside value_range (default uniform)."
_INPUT_COMPAT = "'fixed' (default) honours TensorList value ranges; 'official' reproduces the official generator " \
                "bit for bit, including its TensorList range bug."
_GOLDEN_PRECISION = "precision of the golden truth: fp64_cpu (default; float inputs up-cast to float64) or " \
                    "native_cpu (the case's own dtypes)."
_KB_TRIALS = f"KernelBench: correctness trials per problem, each on its own seed, besides the timed case (default " \
             f"{DEFAULT_KB_TRIALS})."
_KB_COMPILE = "KernelBench: also time torch.compile of the reference Model as a second baseline."
_KB_MAX_INPUT = "KernelBench: skip (not grade) problems whose get_inputs() makes more than this many GiB of " \
                "tensors, sized on the meta device (default: no limit)."
_HIDDEN_CASES = "judge-only hidden cases: a tree mirroring the task tree with a cases.yaml per operator in the " \
                "official format (ids never clash with public ones). Graded and scored apart; nothing of them " \
                "reaches a report beyond an opaque id, a status and a failure type."
_HIDDEN_GENERATE = "per operator, N hidden cases generated from the public ones under the session secret (or " \
                   "--cann-seed): new shapes within the constraints the public cases show (default 0)."
_HIDDEN_GATE = "on (default when hidden cases exist): an operator that passes every public case but fails a " \
               "hidden one is not_ranked ('fails held-out cases') and scores 0 in the combined total."
_HAP_CAP = "clip each case's HAP score at 1 (a bounded reward); the official formula has no cap."
# resources
_CASE_TIMEOUT = f"seconds one candidate call may take before its worker is killed and the case fails as timeout " \
                f"(default {DEFAULT_CASE_TIMEOUT_S:g})."
_BUILD_TIMEOUT = f"seconds build.sh may take (default {DEFAULT_BUILD_TIMEOUT_S:g})."
_GOLDEN_TIMEOUT = f"seconds a golden may take for one case before it fails as golden_error (default " \
                  f"{DEFAULT_GOLDEN_TIMEOUT_S:g})."
_SESSION_MEMORY = "memory the whole session may use, split by the memory plan between its pytest workers and their " \
                  "golden and candidate workers; a case whose estimated need does not fit its share is too_large, " \
                  "not run (default: the least of MemAvailable at the start, the cgroup limit and ulimit -v, less " \
                  "10%)."
_WORKER_MEMORY = "resident memory a candidate worker may use before it is killed and the case fails as oom_killed " \
                 "(default: the session's memory plan, one case's share)."
_GOLDEN_MEMORY = f"address-space budget of each golden worker in GiB, at least {MIN_GOLDEN_MEMORY_GIB:g} (default: " \
                 "the session's memory plan, one case's share plus 2 GiB of unbacked mappings; the kernel's OOM " \
                 "killer is pointed at golden workers, never at pytest)."
_MEMORY_POOL = "what the cases in flight may reserve together, each its estimated need, waiting in arrival order " \
               "while it cannot fit: auto (default) the largest case plus a third-quartile case per other worker, " \
               "so two outliers never run together, and at least 1 GiB per worker; machine: every worker's whole " \
               "share of the memory plan; or a number of GiB."
_DISPATCH = "how xdist's load scheduling hands cases to workers: memory (default) largest estimated memory need " \
            "first, each to a worker when it fits in the memory pool beside what the other workers hold; xdist: " \
            "xdist's own collection-order chunks. Other --dist modes are left as they are."
_GOLDEN_CACHE = f"directory caching golden outputs across runs (default {DEFAULT_GOLDEN_CACHE} under the rootdir; " \
                "'off' disables)."
_CACHE_MIN_FREE = f"the golden cache stops writing (with a warning, grading goes on) once its disk has less than " \
                  f"this many GiB free (default {DEFAULT_MIN_FREE_GIB:g}; 0 writes until the disk is full)."
_CACHE_MAX = f"at the end of a session the golden cache's least recently used entries are removed until it holds " \
             f"at most this many GiB (default {DEFAULT_MAX_GIB:g}; 'off': no bound)."
# the run itself
_RESUME = "skip cases already recorded in results.jsonl for the same submission and every setting that changes a " \
          "result (the README's options table marks them)."
_SHARD = "grade only the K-th of N deterministic shares of the operators."
_FAIL_UNDER = "exit non-zero when the run's total score is below SCORE (a CI gate in one option)."
_REVEAL = "write the session secret (hex) to PATH, mode 0600, after the workers stopped; reports record only its " \
          "commitment (config.secret_commitment; `cannbench secret` checks a pair)."
_REBUILD = "build from the source's build.sh even when dist/ holds a prebuilt wheel (which is otherwise graded, " \
           "with a warning when the sources are newer than it)."
_LEADERBOARD = "leaderboard JSON written at session end (default <report dir>/leaderboard.json); every case is " \
               "also appended to results.jsonl beside it as it finishes."
_MARKDOWN = "also write a Markdown summary (e.g. $GITHUB_STEP_SUMMARY); `cannbench report` renders one from any " \
            "leaderboard."
_EVAL_REPORT = "also write the official EvalReport JSON shape; `cannbench report` renders one from any leaderboard."


@dataclass(frozen=True)
class Settings:
    """Everything the plugin needs from the command line and ini file, resolved once. Fields are parsed in this
    order (the leaderboard's default reads the report directory)."""

    tasks: str | None = setting(None, "tasks", _TASKS, v.tasks(), results=False, per_job=True, cli=True,
                                metavar="PATH")
    sources: tuple[str, ...] = setting((), "source", _SOURCE, specs.source(), results=False, per_job=True, cli=True,
                                       metavar="DIR|@golden|@installed", many=True)
    source: str | None = derived(None, "sources", results=False, per_job=True)  # the first submission directory
    self_check: bool = derived(False, "sources", results=True)  # --cann-source @golden
    no_install: bool = derived(False, "sources", results=True)  # --cann-source @installed
    bench: str = setting("auto", "bench", _BENCH, v.choice(BENCHES), results=True, cli=True,
                         metavar="|".join(BENCHES))
    report_dir: str = setting(DEFAULT_REPORT_DIR, "report-dir", _REPORT_DIR, v.report_dir(), results=False,
                              per_job=True, cli=True, metavar="DIR")
    leaderboard: str = setting("", "leaderboard", _LEADERBOARD, v.leaderboard(), results=False, per_job=True,
                               was_cli=True, metavar="PATH")
    device: str = setting("auto", "device", _DEVICE, specs.device(), results=True, cli=True,
                          metavar="auto|cpu|cuda|npu[:IDS]")
    device_ids: tuple[int, ...] = derived((), "device", results=False, per_job=True)
    hardware: str | None = setting(None, "hardware", _HARDWARE, v.text(), results=True, cli=True, metavar="KEY")
    perf: bool = setting(True, "no-perf", _NO_PERF, v.flag(invert=True), results=True, cli=True, flag=True)
    warmup: int = setting(DEFAULT_WARMUP, "warmup", _WARMUP, v.integer(at_least=0), results=True, cli=True,
                          metavar="N")
    repeat: int = setting(DEFAULT_REPEAT, "repeat", _REPEAT, specs.repeat(), results=True, cli=True,
                          metavar="N|auto|MIN..MAX")  # the count, or auto's minimum
    repeat_auto: bool = derived(True, "repeat", results=True)
    repeat_max: int = derived(DEFAULT_REPEAT_MAX, "repeat", results=True)
    timing_target: float = setting(DEFAULT_TIMING_TARGET_PCT / 100, "timing-target", _TIMING_TARGET,
                                   v.percent(above=0), results=True, cli=True, metavar="PCT")  # a fraction
    seed: int = setting(0, "seed", _SEED, v.integer(at_least=0), results=True, cli=True, metavar="N")
    checker: str = setting("relative_error", "checker", _CHECKER, specs.checker(), results=True, cli=True,
                           metavar="relative_error|allclose|kernelbench")
    kb_accuracy: str = derived("kernelbench", "checker", results=True)  # kernelbench | cann
    guard: str = setting("block", "guard", _GUARD, specs.guard(), results=True, cli=True,
                         metavar="block|kernelbench|strict|warn|off")
    kb_guard: str = derived("coverage", "guard", results=True)  # coverage | kernelbench | cann (guard.policy)
    sandbox: str = setting("auto", "sandbox", _SANDBOX, v.choice(SANDBOX_MODES), results=True, cli=True,
                           metavar="|".join(SANDBOX_MODES))
    golden_cache: str | None = setting(DEFAULT_GOLDEN_CACHE, "golden-cache", _GOLDEN_CACHE, v.golden_cache(),
                                       results=False, per_job=True, cli=True, metavar="DIR|off")
    session_memory_gib: float | None = setting(None, "session-memory", _SESSION_MEMORY, v.real(above=0, unit="GiB"),
                                               results=False, per_job=True, cli=True, metavar="GIB")
    case_timeout_s: float = setting(DEFAULT_CASE_TIMEOUT_S, "case-timeout", _CASE_TIMEOUT,
                                    v.real(above=0, unit="seconds"), results=False, cli=True, metavar="SEC")
    kb_trials: int = setting(DEFAULT_KB_TRIALS, "kb-trials", _KB_TRIALS, v.integer(at_least=1), results=True,
                             cli=True, metavar="N")
    kb_compile: bool = setting(False, "kb-compile", _KB_COMPILE, v.flag(), results=True, cli=True, flag=True)
    hidden_cases: str | None = setting(None, "hidden-cases", _HIDDEN_CASES, v.directory(), results=False,
                                       per_job=True, cli=True, metavar="DIR")
    hidden_generate: int = setting(0, "hidden-generate", _HIDDEN_GENERATE, v.integer(at_least=0), results=True,
                                   cli=True, metavar="N")
    resume: bool = setting(False, "resume", _RESUME, v.flag(), results=False, per_job=True, cli=True, ini=False,
                           flag=True, was_ini=True)
    shard: tuple[int, int] | None = setting(None, "shard", _SHARD, v.shard(), results=False, per_job=True, cli=True,
                                            ini=False, was_ini=True, metavar="K/N")
    fail_under: float | None = setting(None, "fail-under", _FAIL_UNDER, v.real(), results=False, per_job=True,
                                       cli=True, ini=False, was_ini=True, metavar="SCORE")
    reveal_secret: str | None = setting(None, "reveal-secret", _REVEAL, v.reveal_path(), results=False, per_job=True,
                                        cli=True, ini=False, was_ini=True, recorded=False, metavar="PATH")
    # ini-only (-o cann_x=... on the command line): expert knobs
    input_dist: str = setting("uniform", "input-dist", _INPUT_DIST, v.choice(INPUT_DISTS), results=True,
                              was_cli=True, metavar="|".join(INPUT_DISTS))
    input_compat: str = setting("fixed", "input-compat", _INPUT_COMPAT, v.choice(INPUT_COMPAT_MODES), results=True,
                                was_cli=True, metavar="|".join(INPUT_COMPAT_MODES))
    golden_precision: str = setting("fp64_cpu", "golden-precision", _GOLDEN_PRECISION, v.choice(GOLDEN_PRECISIONS),
                                    results=True, was_cli=True, metavar="|".join(GOLDEN_PRECISIONS))
    kb_max_input_gib: float | None = setting(None, "kb-max-input-gib", _KB_MAX_INPUT, v.real(above=0, unit="GiB"),
                                             results=True, was_cli=True, metavar="GIB")
    hap_target: float = setting(DEFAULT_HAP_TARGET, "hap-target", _HAP_TARGET, v.real(at_least=0, below=0.5),
                                results=True, was_cli=True, metavar="H")  # absolute, on HAP's 0..1 scale; 0: off
    timing_budget_s: float = setting(DEFAULT_TIMING_BUDGET_S, "timing-budget", _TIMING_BUDGET,
                                     v.real(at_least=0, unit="seconds"), results=True, was_cli=True, metavar="SEC")
    timing_threads: int = setting(1, "timing-threads", _TIMING_THREADS, v.timing_threads(), results=True,
                                  was_cli=True, metavar="N|all")  # 0: every usable core (state.timing_threads)
    timing_isolation: str = setting("fence", "timing-isolation", _TIMING_ISOLATION, v.choice(ISOLATION_MODES),
                                    results=True, was_cli=True, metavar="|".join(ISOLATION_MODES))
    cuda_graph: str = setting("off", "cuda-graph", _CUDA_GRAPH, v.choice(CUDA_GRAPH_MODES), results=True,
                              was_cli=True, metavar="|".join(CUDA_GRAPH_MODES))
    freq_boost: bool = setting(True, "no-freq-boost", _NO_FREQ_BOOST, v.flag(invert=True), results=True,
                               was_cli=True, flag=True)
    profiler_level: str = setting("Level1", "profiler-level", _PROFILER, v.choice(PROFILER_LEVELS), results=True,
                                  was_cli=True, metavar="|".join(PROFILER_LEVELS))
    hidden_gate: bool = setting(True, "hidden-gate", _HIDDEN_GATE, v.on_off(), results=False, was_cli=True,
                                metavar="on|off")
    hap_cap: bool = setting(False, "hap-cap", _HAP_CAP, v.flag(), results=False, was_cli=True, flag=True)
    build_timeout_s: float = setting(DEFAULT_BUILD_TIMEOUT_S, "build-timeout", _BUILD_TIMEOUT,
                                     v.real(above=0, unit="seconds"), results=False, was_cli=True, metavar="SEC")
    golden_timeout_s: float = setting(DEFAULT_GOLDEN_TIMEOUT_S, "golden-timeout", _GOLDEN_TIMEOUT,
                                      v.real(above=0, unit="seconds"), results=False, was_cli=True, metavar="SEC")
    worker_memory_gib: float | None = setting(None, "worker-memory", _WORKER_MEMORY, v.real(above=0, unit="GiB"),
                                              results=False, per_job=True, was_cli=True, metavar="GIB")
    golden_memory_gib: float | None = setting(
        None, "golden-memory", _GOLDEN_MEMORY,
        v.real(at_least=MIN_GOLDEN_MEMORY_GIB, unit="GiB", why=": it limits address space, and torch alone "
               "reserves about 0.6 GiB of it"), results=False, per_job=True, was_cli=True, metavar="GIB")
    memory_pool: str | float = setting("auto", "memory-pool", _MEMORY_POOL, v.memory_pool(), results=False,
                                       per_job=True, was_cli=True, metavar="auto|machine|GIB")
    dispatch: str = setting("memory", "dispatch", _DISPATCH, v.choice(DISPATCH_MODES), results=False, per_job=True,
                            was_cli=True, metavar="|".join(DISPATCH_MODES))
    golden_cache_min_free_gib: float = setting(DEFAULT_MIN_FREE_GIB, "golden-cache-min-free", _CACHE_MIN_FREE,
                                               v.real(at_least=0, unit="GiB"), results=False, per_job=True,
                                               was_cli=True, metavar="GIB")
    golden_cache_max_gib: float | None = setting(DEFAULT_MAX_GIB, "golden-cache-max", _CACHE_MAX, v.gib_or_off(),
                                                 results=False, per_job=True, was_cli=True, metavar="GIB|off")
    rebuild: bool = setting(False, "rebuild", _REBUILD, v.flag(), results=False, per_job=True, was_cli=True,
                            flag=True)
    markdown: str | None = setting(None, "markdown", _MARKDOWN, v.output_file(), results=False, per_job=True,
                                   was_cli=True, metavar="PATH")
    eval_report: str | None = setting(None, "eval-report", _EVAL_REPORT, v.output_file(), results=False,
                                      per_job=True, was_cli=True, metavar="PATH")
    # made by the plugin
    secret: str = internal("", "a per-session secret mixed into every input seed when grading a submission without "
                           "--cann-seed; only its commitment is recorded (report.secret)", per_job=True,
                           recorded=False, repr=False)
    active: bool = internal(True, "options.asked(): False leaves the run alone (no collection, files, header or "
                            "report section)", per_job=True)

    @property
    def hidden(self) -> bool:
        """Whether this run has a hidden split at all."""
        return bool(self.hidden_cases or self.hidden_generate)

    def as_dict(self) -> dict[str, Any]:
        """Every recorded setting: not the secret, nor where to reveal it (the leaderboard records its commitment)."""
        data = asdict(self)
        return {f.name: data[f.name] for f in fields(self) if declaration_of(f).recorded}
