"""pytest-cannbench: grade CANN Bench operator submissions as pytest items.

The package is imported by pytest in every session of the environment (it is a
``pytest11`` plugin), so nothing here may import torch, numpy or yaml.
"""

__version__ = "0.1.0"
