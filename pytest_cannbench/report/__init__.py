"""After the verdicts: the controller's collector, the terminal summary, the journal (``results.jsonl``
and resume), scoring (Eq.3/4/5), the leaderboard, HTML, Markdown, the official EvalReport and merge.

Nothing here imports torch. The report is fed plain data (outcomes, the board, what the front-end knows of the
run): it reaches into no room that grades.

May import: vocab, options, outcome, atomic, figures.
"""
