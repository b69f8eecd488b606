"""Child processes and the judge's handles on them: the golden worker (trusted task code) and the
candidate worker (submission code, contained), their wire formats and the shared-memory tensor region.

Every child process starts in its own ``*_main`` module, which never imports pytest. The ``*_client``
modules are the judge's side: spawning, exchanging and killing.
May import: ``taskformat``, ``guard`` (worker side), ``timing.in_worker``, ``kernelbench.problem``.
"""
