"""Leaderboard runs across a Ray cluster (``cannbench cluster-grade``, ``docs/cluster.md``).

One submission graded on a whole task tree: the operators split into shards balanced by case count
(:mod:`plan`), each shard graded on a node by a real pytest session of this plugin in a subprocess
(:mod:`shard`, the node side), its report directory shipped back as bytes through Ray's object store, and the
shards merged by :mod:`report.merge <pytest_cannbench.report.merge>` into the files a local run writes
(:mod:`assemble`). :mod:`connect` joins or starts the cluster and counts its judge slots from node resources;
:mod:`grade` runs the shards (retries, progress, a node lost mid-run); :mod:`command` is the CLI's part.

Ray is imported only inside functions: the package imports without it (the ``cluster`` extra installs it).
Never ``serve`` (the HTTP grading service is another room), and nothing that grades in this process (``judge``,
``workers``, ``nodes``, ``core``): grading happens only in the shards' pytest sessions.

May import: report (merge, leaderboard, page, splits, collector), taskformat (task trees as data), vocab, outcome,
atomic, scratch (a shard's work directory, reaped if its process dies).
"""
