"""The submission, once per session: build (``build.sh`` or a prebuilt wheel), private install, the JIT build
stage for code that compiles at import (``jit_build`` judge side, ``jit_main`` the child, ``jit_load`` the
worker's router), interface discovery (which callable implements which operator), KernelBench module lookup,
and the candidates of a multi-candidate run (``generations``).

May import: ``vocab``, ``workers`` (discovery runs in a candidate worker), ``guard`` (scans), ``options``.
"""
