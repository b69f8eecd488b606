"""Repository-level pytest configuration.

The plugin itself is loaded through its ``pytest11`` entry point (``pip install -e .``);
nothing here is needed to use it. This file only keeps generated directories out of
collection when pytest runs from the repository root.
"""

collect_ignore = [".cannbench-cache", "reports", "benchmarks"]
