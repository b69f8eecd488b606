"""Anti-cheat: the runtime guard in the candidate worker (builtin kernels closed at the dispatcher, op tree,
identities, audit hook), seccomp containment, the ELF symbol scan (an allowlist of what a kernel library may import
from torch), the static scan of submission sources (telemetry), and the policy that turns the guard's findings into
a call's verdict.

The worker-side modules (``runtime``, ``forbid``, ``containment``) run inside the submission's process; the scans
(``elf_symbols``, ``torch_imports``, ``scan*``) and ``policy`` run in the judge, the scans before any submission
code. The guard kinds are defined once in :mod:`pytest_cannbench.outcome`. The worker hands the runtime guard the
functions of its own whose identities it must watch (the timers, the tensor wire): the guard knows no other room.

May import: vocab (device kinds, the option words it owns), outcome.
"""
