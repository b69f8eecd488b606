"""Anti-cheat: the runtime guard in the candidate worker (op tree, identities, audit hook), seccomp
containment, the ELF symbol scan and the static scan of submission sources (telemetry).

The worker-side modules (``runtime``, ``containment``) run inside the submission's process; the scans
run in the judge before any submission code. May import: ``workers.tensor_wire``, ``timing.in_worker``
(to capture their identities) and its own modules.
"""
