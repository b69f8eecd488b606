"""A cheating C++ submission against the CPU floor and the thread budget (see csrc/ops.cpp)."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="cann_bench",
    version="0.0.1",
    packages=["cann_bench"],
    ext_modules=[CppExtension("cann_bench._C", ["csrc/ops.cpp"], extra_compile_args=["-O2", "-g0"],
                              extra_link_args=["-pthread"])],
    cmdclass={"build_ext": BuildExtension},
    zip_safe=False,
)
