"""Timing of a case that passed: the protocol (judge side ``perf``, worker side ``in_worker``),
statistics and plausibility (``stats``), devices and the timing lock, NPU profiles, anchors
(metadata or live) and the roofline.

May import: ``vocab``, ``taskformat``, ``judge`` (timed outputs are verified), ``workers``, ``options``, ``outcome``.
"""
