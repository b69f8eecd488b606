"""pytest-cannbench: grade CANN Bench operator submissions as pytest items.

The package is imported by pytest in every session of the environment (it is a
``pytest11`` plugin), so nothing here may import torch, numpy or yaml.

The rooms (subpackages) form layers, and each declares what it may import in its ``__init__.py`` ("May import:");
``tests/unit/test_layout.py`` holds every import to those lists, TYPE_CHECKING and function-level ones too.
From the bottom: the vocabulary and utilities on top of the package (below); ``taskformat``, ``guard``,
``kernelbench``; ``timing`` (measurement); ``workers`` (the child processes); ``submission``; ``judge`` (one case's
verdict and timing); ``core`` (one judge, one case's whole life); and the front-ends: ``nodes`` with ``plugin`` (the
pytest run), ``cli``. ``report`` is fed plain data and needs only the vocabulary. The top-level modules:

Top-level modules may import:
    atomic: nothing
    cbuild: scratch
    cli: options, outcome, scratch, report, taskformat, kernelbench, timing, judge.task_quality (cannbench check),
        workers.limits (the cores cannbench roofline measures with)
    figures: nothing
    options: nothing
    outcome: nothing
    phases: nothing
    plugin: options
    procs: nothing
    scratch: nothing
"""

__version__ = "0.1.0"
