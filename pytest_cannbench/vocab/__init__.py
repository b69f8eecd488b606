"""The package's shared vocabulary, below every room: the case-key grammar (``casekey``), the registries of names
that options, the CLI, the judge, the timing and the guard agree on (``registry``: accuracy checkers, timers, device
kinds), and the shapes of a case's records as plain JSON data (``records``: the timing record, the case record).

Plain data and pure functions, so any process may import it (the controller, a judge, a worker, the option
parser) without torch or pytest. The case's own verdict vocabulary (statuses, failure types) is
:mod:`pytest_cannbench.outcome`. Only the standard library besides:

May import: nothing.
"""
