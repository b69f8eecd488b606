"""The KernelBench format as another task source: a problem file's spec (torch- and pytest-free, read at
collection) and loading a problem (``Model``, ``get_inputs``, ``get_init_inputs``) in a worker. The pytest nodes
are ``nodes.problems``; the judge's case is ``judge.kernelbench``.

May import: vocab (the case-key grammar).
"""
