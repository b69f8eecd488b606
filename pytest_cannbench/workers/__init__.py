"""Child processes and the judge's handles on them: the golden worker (trusted task code) and the
candidate worker (submission code, contained), their wire formats and the shared-memory tensor region.

Every child process starts in its own ``*_main`` module, which never imports pytest. The ``*_client``
modules are the judge's side, built on :mod:`client` (spawning, exchanging, killing); :mod:`batch` holds the
judge's records of a timing batch, :mod:`contract` the judge's own checks of a candidate call (``/proc`` and the
region), :mod:`env_scrub` what a submission sees of the environment, :mod:`limits` what the process inherited
(rlimits, cgroups) and the budgets clamped to it, :mod:`jit_load` the candidate worker's router to the JIT build
stage's artefacts.

May import: vocab, outcome, phases, atomic, procs, taskformat, guard, kernelbench, timing.
"""
