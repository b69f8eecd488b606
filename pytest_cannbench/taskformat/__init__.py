"""Task format: reading task trees (``proto.yaml``, ``cases.yaml``, ``cases.csv``, ``metadata/``), dtypes,
``perf_model`` expressions and deterministic input planning.

Owns everything collection needs, so nothing here imports torch at module level (``inputs`` imports it
inside the generation functions). Besides the standard library and yaml:

May import: vocab (the case-key grammar, the input words), cbuild (the input draw's C kernel).
"""
