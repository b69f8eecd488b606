"""The submission, once per session: build (``build.sh`` or a prebuilt wheel), private install, the JIT build
stage for code that compiles at import (``jit_build`` judge side, ``jit_main`` the child), interface discovery
(which callable implements which operator), KernelBench module lookup, and the candidates of a multi-candidate run
(``generations``). The worker's router to the JIT stage's artefacts is ``workers.jit_load``.

May import: vocab, outcome, scratch, procs, guard (scans), workers (discovery runs in a candidate worker).
"""
