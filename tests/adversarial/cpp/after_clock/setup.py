"""A cheating C++ submission: work after the clock stops (see csrc/ops.cpp)."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="cann_bench",
    version="0.0.1",
    packages=["cann_bench"],
    ext_modules=[CppExtension("cann_bench._C", ["csrc/ops.cpp"], extra_compile_args=["-O1", "-g0"])],
    cmdclass={"build_ext": BuildExtension},
    zip_safe=False,
)
