"""pytest nodes: an operator's ``cases.yaml`` becomes a File, each case an Item; operator sharding; the run's
hooks (``frontend``) and its controller and judge roles over the grading core (``session``).

Owns the items' life cycle (setup, runtest, teardown) and what each case records on its stash. The pytest
front-end: it drives ``core`` and feeds ``report``; what it reads of the rooms below is named one module at a time.

May import: vocab, options, outcome, scratch, core, report, taskformat, kernelbench, judge.case (an item's case source),
judge.kernelbench (a problem's case source), judge.source, judge.task_quality (the hidden cases' quality gate),
judge.goldens (the golden cache's tidying), judge.error_scan (the comparison kernel's header line),
judge.scan_kernel, submission.build (the header's build lines), guard.sandbox, timing.anchors, timing.in_worker,
timing.machine, workers.cpu_watch, workers.dispatch, workers.xdist_dispatch, workers.huge_pages, workers.limits.
"""
