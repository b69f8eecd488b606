"""Measurement: the timed batch inside the worker (``in_worker``, ``cuda_graph``, the NPU profiler's
``npu_run``/``npu_parse``, the flush's libc reads in ``raw_memory``), statistics and plausibility (``stats``),
devices and the timing lock, the timing fence and load samples (``isolation``), GPU telemetry, anchors (metadata
or live) and the roofline with its calibration child. The judge's protocol that drives them for one case is
``judge.perf``.

May import: vocab, options, atomic, procs, figures, taskformat.
"""
