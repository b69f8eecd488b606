"""The submission, once per session: build (``build.sh`` or a prebuilt wheel), private install,
interface discovery (which callable implements which operator), KernelBench module lookup.

May import: ``workers`` (discovery runs in a candidate worker), ``guard`` (scans), ``options``.
"""
