"""A multi-candidate run's boards: one per candidate, and a summary over the batch.

Every candidate (a ``--cann-source`` directory, or one sample of a KernelBench generation directory) gets the
board a single-candidate run would have (operator scores and the ``kernelbench`` section). The summary is
KernelBench's view of a batch of samples: per problem ``n`` graded samples, ``c`` correct, pass@k with the
unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)``, and the best speed-up among correct
samples; over the batch, pass@k averaged over problems with at least k samples and ``fast_p`` over every
graded (candidate, problem) pair. Outcomes carry their candidate (``CaseOutcome.candidate``); none: no boards.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytest_cannbench.report.board import CandidatesSummary, ScoredCases, SummaryRow
from pytest_cannbench.report.kernelbench import FAST_P, ProblemResult, problem_results, section
from pytest_cannbench.vocab.records import CaseRecord

KS = (1, 2, 5, 10, 20, 50, 100)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator for ``c`` correct of ``n`` samples (``k <= n``)."""
    if k > n or k < 1:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def by_candidate(outcomes: Iterable[CaseRecord]) -> dict[str, list[CaseRecord]]:
    groups: dict[str, list[CaseRecord]] = defaultdict(list)
    for o in outcomes:
        if o.get("candidate"):
            groups[str(o["candidate"])].append(o)
    return dict(sorted(groups.items()))


def summary(results: dict[str, list[ProblemResult]]) -> CandidatesSummary:
    """Per problem pass@k and best speed-up over the candidates, pass@k over problems, fast_p over the batch."""
    per_problem: dict[str, list[tuple[str, ProblemResult]]] = defaultdict(list)
    for name, problems in results.items():
        for r in problems:
            if r.graded:
                per_problem[r.rel_path].append((name, r))
    rows: list[SummaryRow] = []
    for rel_path, graded in sorted(per_problem.items()):
        n, correct = len(graded), [(name, r) for name, r in graded if r.correct]
        speeds = [(r.speedup, name) for name, r in correct if r.speedup]
        best = max(speeds) if speeds else None
        rows.append(SummaryRow(rel_path=rel_path, samples=n, correct=len(correct),
                               pass_at_k={str(k): pass_at_k(n, len(correct), k) for k in KS if k <= n},
                               best_speedup=best[0] if best else None, best_candidate=best[1] if best else None,
                               correct_candidates=[name for name, _ in correct]))
    pass_k = {}
    for k in KS:
        values = [row["pass_at_k"][str(k)] for row in rows if str(k) in row["pass_at_k"]]
        if values:
            pass_k[str(k)] = sum(values) / len(values)
    pairs = [r for problems in results.values() for r in problems if r.graded]
    fast = {f"{p:g}": (sum(1 for r in pairs if r.correct and (p == 0 or (r.speedup or 0) > p)) / len(pairs)
                       if pairs else None) for p in FAST_P}
    return CandidatesSummary(candidates=len(results), problems=rows, pass_at_k=pass_k, fast_p=fast,
                             graded_pairs=len(pairs))


def candidate_boards(outcomes: Iterable[CaseRecord], score: Callable[[list[CaseRecord]], ScoredCases]
                     ) -> tuple[dict[str, ScoredCases], CandidatesSummary] | None:
    """Each candidate's board and the summary over the batch, or None for a single-candidate run. ``score`` is the
    leaderboard's own scoring of a list of outcomes (so each candidate's board is exactly a single run's)."""
    groups = by_candidate(outcomes)
    if not groups:
        return None
    boards: dict[str, ScoredCases] = {}
    for name, group in groups.items():
        board = score(group)
        kb = section(group)
        if kb is not None:
            board["kernelbench"] = kb
        boards[name] = board
    return boards, summary({n: problem_results(g) for n, g in groups.items()})


def summary_lines(multi: Mapping[str, Any] | None) -> list[str]:
    """The terminal's account of a multi-candidate run."""
    if not multi:
        return []
    s = multi["summary"]
    ks = ", ".join(f"pass@{k} {v:.1%}" for k, v in s["pass_at_k"].items())
    lines = [f"candidates: {s['candidates']} in one session; {ks or 'no graded problem'}"]
    for row in s["problems"][:30]:
        best = f"x{row['best_speedup']:.2f} ({row['best_candidate']})" if row["best_speedup"] else "-"
        lines.append(f"  {row['rel_path']:<44} {row['correct']}/{row['samples']} correct, best speed-up {best}")
    fast = ", ".join(f"fast_{p} {'-' if v is None else f'{v:.1%}'}" for p, v in s["fast_p"].items())
    lines.append(f"  over the batch ({s['graded_pairs']} graded candidate-problem pairs): {fast}")
    return lines
