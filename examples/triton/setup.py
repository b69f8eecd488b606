"""Builds the cann_bench wheel: pure Python; Triton compiles the kernels in cann_bench/ at their first launch."""

from setuptools import setup

setup(
    name="cann_bench",
    version="0.1.0",
    description="Triton GPU kernels for CANN Bench tasks",
    packages=["cann_bench"],
    python_requires=">=3.9",
    zip_safe=False,
)
