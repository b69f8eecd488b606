"""The KernelBench format as another task source: collecting problem files and loading a problem
(``Model``, ``get_inputs``, ``get_init_inputs``) in a worker.

May import: ``vocab``, ``nodes``, ``taskformat``, ``outcome``, ``options``, ``state``.
"""
