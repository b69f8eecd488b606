"""Builds the cann_bench wheel: the CUDA kernels in csrc/ as cann_bench/_C*.so, plus the Python loader."""

import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension


def arch_flags() -> list[str]:
    """nvcc's target: TORCH_CUDA_ARCH_LIST when set (BuildExtension reads it itself), else the visible GPU's
    compute capability, else 9.0 (H100/H200)."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return []
    major, minor = 9, 0
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
    return [f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"]


# -O3 only: the kernels rely on the CUDA math library's full-precision expf/log1pf/erfcf and IEEE division.
# -g0 drops the debug information Python's own CFLAGS ask for. No -std: BuildExtension adds the standard the
# installed torch's headers need (C++17 up to torch 2.11, C++20 in later releases); the sources build as either.
CXX_FLAGS = ["-O3", "-g0"]
NVCC_FLAGS = ["-O3", *arch_flags()]

setup(
    name="cann_bench",
    version="0.1.0",
    description="CUDA kernels for CANN Bench tasks, registered as torch.ops.cann_bench",
    packages=["cann_bench"],
    ext_modules=[
        CUDAExtension(
            "cann_bench._C",
            ["csrc/ops.cpp", "csrc/elementwise.cu", "csrc/reductions.cu", "csrc/matmul.cu"],
            extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS},
        ),
    ],
    cmdclass={"build_ext": BuildExtension},
    zip_safe=False,
)
