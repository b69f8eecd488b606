"""The shape of ``leaderboard.json``: its entries as TypedDicts, from which its JSON Schema is generated
(:mod:`board_schema`, ``report/leaderboard.schema.json``, the table in ``docs/leaderboard.md``).

The board is built as these types (:mod:`leaderboard`) and is plain JSON in the file; each field's ``Annotated``
text is its description in the schema. A key the grader writes that is not declared here fails the schema test
on real boards (tests/unit/test_board_schema.py): a new field is declared here first.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from pytest_cannbench.outcome import FailureType, Split, Status
from pytest_cannbench.vocab.records import IntervalRecord, TimingRecord


class AnchorSource(TypedDict):
    baseline: Annotated[str | None, "live, or metadata:<hardware>"]
    t_hw: Annotated[str | None, "metadata, or the roofline and what it counted"]


class LoadFigures(TypedDict):
    """The machine's load around the case's timed windows."""

    loadavg1_max: Annotated[float | None, "highest 1-minute load average at a window's start or end"]
    cpu_some_avg10_max: Annotated[float | None, "highest CPU pressure (PSI some avg10) at a window's start or end"]
    cpu_stall_pct: Annotated[float | None, "share of the windows' time some task waited for a CPU, %"]
    steal_pct: Annotated[float | None, "share of the machine's CPU time the hypervisor stole in the windows, %"]
    timed_under_load: Annotated[bool, "the case carries the timed_under_load flag"]


class GpuFigures(TypedDict):
    """CUDA: the card around the case's timed windows."""

    sm_mhz_min: Annotated[float | None, "lowest SM clock, MHz"]
    temp_c_max: Annotated[float | None, "highest temperature, °C"]
    power_w_max: Annotated[float | None, "highest power draw, W"]
    gpu_throttled: Annotated[bool, "the case carries the gpu_throttled flag"]
    cuda_graph: Annotated[bool, "CUDA graph replays timed the case"]


class _CaseEntryKeys(TypedDict):
    case_id: Annotated[int | None, "the case id; null for a case filed by position, a task error or a hidden case"]
    key: Annotated[str, "the case key (vocab.casekey): [cand=<c>/]<rel_path>_<id>, _#<position>, _task, "
                        "#hidden-<n>"]
    status: Annotated[str, "the case's status", Status]
    failure_type: Annotated[str | None, "why it did not pass (see Failure types); null when it passed", FailureType]
    message: Annotated[str, "the verdict in words (at most 4000 characters)"]
    accuracy: Annotated[list[dict[str, Any]], "one verdict per output: checker, rule, MERE, MARE, counts "
                                              "(judge.precision.OutputVerdict; docs/precision.md)"]
    t_cand_us: Annotated[float | None, "T_cand: the candidate's median call time, µs; null: not measured"]
    t_baseline_us: Annotated[float | None, "T_baseline, µs"]
    t_hw_us: Annotated[float | None, "T_HW, the hardware limit, µs"]
    anchor_source: Annotated[AnchorSource, "where T_baseline and T_HW come from"]
    hap: Annotated[float | None, "Eq.3's HAP of a passed, timed case; null otherwise"]
    speedup: Annotated[IntervalRecord | None, "T_baseline / T_cand from paired calls, with its interval"]
    hap_interval: Annotated[list[float] | None, "HAP at the two ends of the speed-up's interval"]
    timed_calls: Annotated[int | None, "timed calls the case got"]
    precision: Annotated[float | None, "the relative half-width the timing reached"]
    flags: Annotated[list[str], "what to read the numbers with (timing, HAP and the run's weaker modes)"]
    load: Annotated[LoadFigures | None, "the machine's load around the timed windows; null: not timed"]
    gpu: Annotated[GpuFigures | None, "CUDA: the card around the timed windows; null off CUDA"]
    timing: Annotated[TimingRecord, "the full timing record, less the lock windows and accuracy spans"]
    warnings: Annotated[list[str], "warnings raised while the case ran"]
    split: Annotated[str, "the split the case belongs to", Split]


class CaseEntry(_CaseEntryKeys, total=False):
    """One case of an operator."""

    kernel_coverage: Annotated[dict[str, Any], "KernelBench: share, source, own, work and calls of forward's work "
                                               "in the submission's own kernels (docs/kernelbench.md)"]


class SplitPart(TypedDict):
    score: Annotated[float, "Eq.4 over the split's cases"]
    cases_total: Annotated[int, "the split's cases"]
    cases_passed: Annotated[int, "the split's passed cases"]
    function_rate: Annotated[float | None, "cases_passed / cases_total"]


class _CombinedKeys(TypedDict):
    score: Annotated[float, "Eq.4 over both splits (0 when the gate withholds it)"]
    cases_total: Annotated[int, "cases of both splits"]
    cases_passed: Annotated[int, "passed cases of both splits"]


class CombinedPart(_CombinedKeys, total=False):
    ungated_score: Annotated[float, "the combined score the gate withheld"]


class OperatorSplits(TypedDict):
    """An operator's public and hidden splits (runs with hidden cases only; docs/hidden-cases.md)."""

    public: Annotated[SplitPart | None, "over its public cases"]
    hidden: Annotated[SplitPart | None, "over its hidden cases"]
    combined: Annotated[CombinedPart, "over both"]
    function_rate_gap: Annotated[float | None, "public function rate minus hidden"]
    dropped: Annotated[int, "generated hidden cases dropped ungraded"]
    ranked: Annotated[bool, "false: the hidden gate withholds its combined score"]


class _OperatorEntryKeys(TypedDict):
    rel_path: Annotated[str, "the operator directory (or KernelBench problem file) under its bench root"]
    name: Annotated[str, "the operator's name"]
    level: Annotated[int | None, "N of its levelN directory"]
    status: Annotated[str, "passed, partial, failed, not_ranked, or the error that decides the whole operator "
                           "(missing, a build failure, a tainting failure type, too_large)"]
    score: Annotated[float, "Eq.4: compile + function + performance, at most 100"]
    compile_score: Annotated[float, "100·w_c·(N − compile/runtime failures)/N"]
    function_score: Annotated[float, "100·w_f·passed/N"]
    performance_score: Annotated[float, "100·w_p·ΣHAP(passed)/N"]
    cases_total: Annotated[int, "its collected cases, not-graded ones included"]
    cases_passed: Annotated[int, "passed cases"]
    cases_not_graded: Annotated[int, "cases left out of the score (too_large, needs_npu)"]
    compile_runtime_failures: Annotated[int, "failed cases that deduct from the compile part"]
    score_error: Annotated[str | None, "why the whole operator scores 0; null otherwise"]
    speedup_geomean: Annotated[float | None, "diagnostics: geometric mean of T_baseline / T_cand over passed cases"]
    cases: Annotated[list[CaseEntry], "every case, public first, by case id"]


class OperatorEntry(_OperatorEntryKeys, total=False):
    """One operator (or KernelBench problem) with its cases."""

    splits: Annotated[OperatorSplits, "runs with hidden cases: the split scores and the gate"]
    not_ranked_reason: Annotated[str, "why the hidden gate withholds its combined score"]


class _LevelKeys(TypedDict):
    score: Annotated[float, "Eq.5: the sum of its operators' scores"]
    operators: Annotated[int, "operators of the level"]


class LevelEntry(_LevelKeys, total=False):
    public_score: Annotated[float, "runs with hidden cases: the sum of the public split scores"]
    hidden_score: Annotated[float, "runs with hidden cases: the sum of the hidden split scores"]
    combined_score: Annotated[float, "runs with hidden cases: the sum of the combined scores"]


class DegenerateAnchors(TypedDict):
    count: Annotated[int, "cases whose HAP says nothing (T_baseline below T_HW, or degenerate anchors)"]
    cases: Annotated[list[str], "their keys"]


class BoardSplits(TypedDict):
    """The run's splits (runs with hidden cases only)."""

    public_score: Annotated[float, "the sum of the public split scores"]
    hidden_score: Annotated[float, "the sum of the hidden split scores"]
    combined_score: Annotated[float, "the sum of the combined scores (the total)"]
    function_rate_public: Annotated[float | None, "passed / total over every public case"]
    function_rate_hidden: Annotated[float | None, "passed / total over every hidden case"]
    function_rate_gap: Annotated[float | None, "public minus hidden function rate"]
    not_ranked: Annotated[list[str], "operators the hidden gate withholds"]
    hidden_cases: Annotated[int, "hidden cases graded"]
    dropped: Annotated[int, "generated hidden cases dropped ungraded"]
    gate: Annotated[bool, "cann_hidden_gate was on"]


class ProblemEntry(TypedDict):
    """A KernelBench problem (``report.kernelbench.ProblemResult``)."""

    rel_path: Annotated[str, "the problem file under its bench root"]
    name: Annotated[str, "the problem's name"]
    correct: Annotated[bool, "every item (trials and the timed case) passed"]
    status: Annotated[str, "passed, or the first failing item's status"]
    items_passed: Annotated[int, "items passed"]
    items_total: Annotated[int, "items"]
    t_cand_us: Annotated[float | None, "the timed case's T_cand, µs"]
    t_baseline_us: Annotated[float | None, "the eager baseline's median, µs"]
    t_compile_us: Annotated[float | None, "the torch.compile baseline's median, µs"]
    speedup: Annotated[float | None, "T_baseline / T_cand of a correct problem"]
    speedup_vs_compile: Annotated[float | None, "T_compile / T_cand of a correct problem"]
    failure: Annotated[str, "the first failing item's type and message"]
    kernel_coverage: Annotated[float | None, "the lowest of its items' kernel coverage"]
    coverage_source: Annotated[str, "what measured it"]


class _KernelBenchKeys(TypedDict):
    candidates: Annotated[int, "candidates whose items are pooled per problem"]
    problems_total: Annotated[int, "problems collected"]
    problems_graded: Annotated[int, "problems graded"]
    problems_correct: Annotated[int, "graded problems correct"]
    correctness_rate: Annotated[float | None, "problems_correct / problems_graded"]
    fast_p: Annotated[dict[str, float | None], "p -> share of graded problems correct and faster than p"]
    speedup_geomean: Annotated[float | None, "geometric mean speed-up over correct problems"]
    problems: Annotated[list[ProblemEntry], "every problem"]


class KernelBenchSection(_KernelBenchKeys, total=False):
    """KernelBench's metrics (``report.kernelbench.section``; docs/kernelbench.md)."""

    fast_p_vs_compile: Annotated[dict[str, float | None], "--cann-kb-compile: fast_p against torch.compile"]
    speedup_vs_compile_geomean: Annotated[float | None, "--cann-kb-compile: geometric mean against torch.compile"]


class _ScoredKeys(TypedDict):
    total_score: Annotated[float, "Eq.5: the sum of every operator's score"]
    levels: Annotated[dict[str, LevelEntry], "levelN (or other) -> its sum"]
    operators: Annotated[list[OperatorEntry], "every operator, by rel_path"]
    degenerate_anchors: Annotated[DegenerateAnchors, "cases whose anchors make HAP meaningless"]


class ScoredCases(_ScoredKeys, total=False):
    """Scores of a set of case outcomes: the board's, and each candidate's board."""

    splits: Annotated[BoardSplits, "runs with hidden cases: the split totals"]
    kernelbench: Annotated[KernelBenchSection, "runs with KernelBench problems"]


class SummaryRow(TypedDict):
    rel_path: Annotated[str, "the problem"]
    samples: Annotated[int, "candidates graded on it"]
    correct: Annotated[int, "of them correct"]
    pass_at_k: Annotated[dict[str, float], "k -> the unbiased pass@k estimate"]
    best_speedup: Annotated[float | None, "the best speed-up among correct candidates"]
    best_candidate: Annotated[str | None, "whose"]
    correct_candidates: Annotated[list[str], "the correct candidates"]


class CandidatesSummary(TypedDict):
    """A multi-candidate run: pass@k and fast_p over the batch (``report.passk``)."""

    candidates: Annotated[int, "candidates in the run"]
    problems: Annotated[list[SummaryRow], "per problem"]
    pass_at_k: Annotated[dict[str, float], "k -> pass@k averaged over problems with at least k samples"]
    fast_p: Annotated[dict[str, float | None], "p -> share of graded (candidate, problem) pairs correct and faster"]
    graded_pairs: Annotated[int, "graded (candidate, problem) pairs"]


class Weights(TypedDict):
    compile: Annotated[float, "w_c"]
    function: Annotated[float, "w_f"]
    performance: Annotated[float, "w_p"]
    hap_cap: Annotated[bool, "cann_hap_cap: each HAP clipped at 1"]


class MergedInput(TypedDict):
    path: Annotated[str, "the input file"]
    kind: Annotated[str, "leaderboard or results.jsonl"]
    cases: Annotated[int, "case outcomes read from it"]
    secret_commitments: Annotated[list[str], "the session secrets' commitments it was graded under"]


class CandidateBoards(TypedDict, total=False):
    """A multi-candidate run's boards (``report.passk``)."""

    candidates: Annotated[dict[str, ScoredCases], "candidate -> its own board, as a run of it alone would score it"]
    summary: Annotated[CandidatesSummary, "the batch: pass@k and fast_p"]


class _BoardKeys(ScoredCases):
    schema: Annotated[str, "pytest-cannbench/leaderboard/1"]
    generated_at: Annotated[str, "when it was written (ISO 8601, UTC)"]
    plugin_version: Annotated[str, "the pytest-cannbench version that wrote it"]
    cases_total: Annotated[int, "every collected case"]
    counts: Annotated[dict[str, int], "case status -> cases"]
    failure_types: Annotated[dict[str, int], "failure type -> cases"]
    submission: Annotated[dict[str, Any] | None, "what was graded: kind, source, build status, wheel and its "
                                                 "sha256, interfaces, build log, seconds"]
    environment: Annotated[dict[str, Any], "python, pytest, torch, platform, device, cpu, hardware key"]
    config: Annotated[dict[str, Any], "every option, the selection, the secret's commitment, the run identity"]
    weights: Annotated[Weights, "the score's weights and the HAP cap"]


class Board(_BoardKeys, CandidateBoards, total=False):
    """``leaderboard.json``: every case's outcome, scored."""

    merged_from: Annotated[list[MergedInput], "cannbench merge: its inputs"]
    cluster: Annotated[dict[str, Any], "cannbench cluster-grade: the cluster, its shards, their nodes and attempts, "
                                       "and the operators no shard brought a verdict for"]
