"""After the verdicts: the controller's collector, the terminal summary, the journal (``results.jsonl``
and resume), scoring (Eq.3/4/5), the leaderboard, HTML, Markdown, the official EvalReport and merge.

Nothing here imports torch. May import: ``vocab``, ``outcome``, ``options``, ``atomic`` and its own modules.
"""
