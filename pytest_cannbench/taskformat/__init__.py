"""Task format: reading task trees (``proto.yaml``, ``cases.yaml``, ``cases.csv``, ``metadata/``), dtypes,
``perf_model`` expressions and deterministic input planning.

Owns everything collection needs, so nothing here imports torch at module level (``inputs`` imports it
inside the generation functions). May import: the standard library, yaml, ``vocab`` (the case-key grammar) and
its own modules only.
"""
