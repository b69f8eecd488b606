"""What a submission's compiled code may import from torch: an allowlist, read from the names its ELF files import.

A kernel library needs little from torch's libraries: allocation (``at::_ops::empty_*``, allocators), tensor and
storage accessors (``at::TensorBase::data_ptr``, sizes, ``c10::TensorImpl``, ``c10::SymInt``), registration
(``TORCH_LIBRARY``: ``torch::Library``, schema inference and parsing, the JIT type singletons, the pybind glue torch
ships), checks and errors (``TORCH_CHECK``'s ``c10::detail::torchCheckFail``, ``c10::Error``), ``at::parallel_for``'s
runtime and, on CUDA, stream, device and error helpers. Everything else torch exports is refused, named and with the
reason: dispatcher lookups (``c10::Dispatcher``, ``OperatorHandle``, ``KernelFunction``, redispatch: builtin kernels
by name), ATen's kernels called directly (``at::native``, ``at::cpu``, ``at::vec``, ...), builtin ops through
``at::_ops`` (only allowed ops, :mod:`builtin_ops`), torch's bundled math (``Sleef_*``, MKL, BLAS and LAPACK,
oneDNN, FBGEMM, XNNPACK, ...), replacing torch's allocator, profiler control (``RecordFunction``, callbacks,
``torch::profiler``), TorchScript and the rest of torch's internals.

"From torch" is decided three ways: the C++ name's outermost namespace (``at``, ``c10``, ``torch``, ``caffe2`` and
the bundled C++ libraries'), the C prefixes of the bundled math libraries, and, where the judge can read them, the
names torch's own shared libraries define (``elf_symbols.torch_exports``): MKL's LAPACK (``sgetrf_``), libuv, the AOTI
C shim.
Names of the C++ runtime (``std::``) and the device runtime (``cuda*``, ``cu*``, ``hip*``) are never torch's,
whoever exports them. Names are read from the mangled form (:func:`qualified_name`, no demangler needed: the worker
checks libraries built while it runs, where it may not call into ctypes).
"""

from __future__ import annotations

import re

from pytest_cannbench.guard import builtin_ops

# Outermost C++ namespaces of torch and of the libraries it bundles
TORCH_NAMESPACES = frozenset({"at", "c10", "torch", "caffe2", "c10d", "fbgemm", "ideep", "dnnl", "mkldnn", "libkineto",
                              "gloo", "tensorpipe", "onnx_torch", "asmjit", "pytorch_jni", "qnnpack", "xnnpack"})
# Never torch's, whoever exports them (torch's libraries export a few std:: instantiations)
SYSTEM_NAMESPACES = frozenset({"std", "__gnu_cxx", "__cxxabiv1", "__cxxabiv2"})
DEVICE_RUNTIME = re.compile(r"(__cuda|cuda|cu[A-Z]|hip|__hip|nvtx|nvrtc)")
# C prefixes of what torch bundles: the math a submission must write itself, and the rest of its innards
BUNDLED_PREFIXES = {
    "Sleef_": "Sleef, torch's bundled vector math", "mkl_": "MKL", "MKL_": "MKL", "cblas_": "BLAS",
    "dnnl_": "oneDNN", "mkldnn_": "oneDNN", "fbgemm": "FBGEMM", "xnn_": "XNNPACK", "pytorch_qnnp_": "QNNPACK",
    "qnnp_": "QNNPACK", "nnp_": "NNPACK", "pthreadpool_": "torch's bundled thread pool",
    "aoti_torch_": "torch's C shim", "torch_": "torch's C API",
}
# Other libraries' jobs are the compute a submission writes itself, and loading code at run time hides what it calls
FORBIDDEN_C_PREFIXES = {
    "cblas_": "BLAS", "sgemm": "BLAS", "dgemm": "BLAS", "hgemm": "BLAS", "gemm_": "BLAS", "mkl_": "MKL",
    "MKL_": "MKL", "dnnl_": "oneDNN", "cublas": "cuBLAS", "cudnn": "cuDNN", "cufft": "cuFFT", "cusparse": "cuSPARSE",
    "cusolver": "cuSOLVER", "LAPACKE_": "LAPACK", "openblas": "OpenBLAS", "dlsym": "run-time symbol lookup",
    "dlvsym": "run-time symbol lookup", "dlopen": "run-time library loading",
}

DISPATCHER = "a dispatcher lookup (it reaches builtin kernels by name)"
KERNEL = "an ATen kernel called directly"
PROFILER = "control of the profiler's op recording"
ALLOCATOR = "replaces torch's allocator"
OUTSIDE = ("torch internals outside what a kernel library may import (allocation, tensor accessors, registration, "
           "checks and errors)")

# Refused, with the reason, before the allowlist is consulted (first match wins)
REFUSED = [(re.compile(p), why) for p, why in [
    (r"c10::(Dispatcher|OperatorHandle|TypedOperatorHandle|KernelFunction|BoxedKernel|OperatorKernel|"
     r"show_dispatch_trace|dispatch_trace_nesting|impl::OperatorEntry|impl::raw_local_dispatch_key_set|"
     r"impl::tls_local_dispatch_key_set|impl::_force_tls_local_dispatch_key_set|detail::_print_dispatch_trace)",
     DISPATCHER),
    (r"torch::jit::(Operator|getOperat|findOperator|getAllOperators|get_operation)", DISPATCHER),
    (r"(aoti_torch_call_dispatcher|torch_call_dispatcher)$", DISPATCHER),
    (r"at::(native|cpu|vec|vml|cpublas|blas|meta|mkldnn|mkl|sparse|quantized|functorch|"
     r"compositeexplicitautograd|compositeimplicitautograd|compositeexplicitautogradnonfunctional|"
     r"cuda::blas|cuda::sparse|cuda::solver|cuda::jit)(::|$)", KERNEL),
    (r"(at|c10|torch)::(.*::)?\w*(RecordFunction|Callback|StepCallbacks|enableRecordFunction|"
     r"isRecordFunctionEnabled|ThreadLocalDebugInfo)", PROFILER),
    (r"(torch::profiler|torch::autograd::profiler|libkineto)(::|$)", PROFILER),
    (r"c10::Set\w*Allocator$|c10::SetAllocator$", ALLOCATOR),
]]

# What a kernel library may import from torch (after REFUSED; at::_ops is decided by the op's name)
ALLOWED = re.compile("|".join(f"(?:{p})" for p in [
    # allocation
    r"at::detail::(empty_|computeStorageNbytes)", r"c10::(Get\w*Allocator|alloc_cpu|free_cpu|Allocator|DataPtr|"
    r"InefficientStdFunctionContext|deleteNothing|detail::deleteNothing|GetDefaultMobileCPUAllocator)(::|$)",
    # tensor and storage accessors, dtypes, devices, shapes
    r"at::(TensorBase|Tensor|OptionalTensorRef|TensorRef|TensorOptions)(::|$)",
    r"c10::(TensorImpl|StorageImpl|Storage|UndefinedTensorImpl|SymbolicShapeMeta|SymInt|SymBool|SymFloat|"
    r"SymNodeImpl|SymNode|intrusive_ptr|weak_intrusive_ptr|AutogradMetaInterface|VariableVersion|TensorOptions|"
    r"Device|DeviceType|Stream|Layout|MemoryFormat|ScalarType|Scalar|Half|BFloat16|Float8\w*|complex|"
    r"SmallVectorBase|ArrayRef|IntArrayRef|SizesAndStrides|DispatchKey|DispatchKeySet|"
    r"initializeFunctionalityOffsetsAndMasks|typeMetaToScalarType|promoteTypes|elementSize|toString|operator|"
    r"str|isValidDeviceType|DeviceTypeName|detail)(::|\W|$)",
    r"c10::impl::(ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|getGlobalPyInterpreter|PyInterpreter|"
    r"PyObjectSlot|GPUTrace|device_guard_impl_registry|getDeviceGuardImpl|VirtualGuardImpl|InlineDeviceGuard|"
    r"SizesAndStrides|cow)(::|$)",
    r"caffe2::(TypeMeta|TypeIdentifier|detail)(::|$)",
    # registration: TORCH_LIBRARY, schemas, the JIT types they name, boxing
    r"torch::(Library|CppFunction|RegisterOperators|detail::TorchLibraryInit|_RegisterOrVerify)(::|$)",
    r"torch::jit::(parseSchema|parseSchemaOrName|parseName)$",
    r"c10::(\w*Type|Type|TypePtr|SingletonOrSharedTypePtr|getTypePtr\w*|FunctionSchema|Argument|OperatorName|"
    r"AliasInfo|Symbol|QualifiedName|RegisterOperators|RegistrationHandleRAII|IValue|ivalue)(::|$)",
    # checks and errors
    r"c10::(\w*Error|Warning|WarningHandler|WarningUtils|warn|report_overflow|SourceLocation|get_backtrace|"
    r"GetExceptionString|throwNullDataPtrError|warnDeprecatedDataPtr)(::|$)",
    r"torch::(PyWarningHandler|translate_exception_to_python|\w*Error)(::|$)",
    # at::parallel_for's runtime
    r"at::(get_thread_num|get_num_threads|init_num_threads|in_parallel_region|lazy_init_num_threads|internal)(::|$)",
    r"c10::ParallelGuard(::|$)",
    # the Python glue torch ships (pybind casters, THP types, autograd metadata and custom functions)
    r"THP\w*$", r"pybind11::", r"torch::autograd::",
    # CUDA: streams, devices, guards, launch checks, the caching allocator's raw allocations
    r"c10::cuda::", r"at::cuda::(getCurrentCUDAStream|getDefaultCUDAStream|getStreamFromPool|CUDAStream|"
    r"getCurrentDeviceProperties|getDeviceProperties|warp_size|detail)(::|$)",
    r"torch::cuda::(device_count|is_available|synchronize)$",
    # the stable C ABI's accessors, allocation and registration
    r"aoti_torch_(get_|dtype_|device_type_|layout_|memory_format_|empty_strided$|create_tensor_from_blob|delete_|"
    r"new_tensor_handle|new_uninitialized_tensor|is_defined|is_contiguous|library_|grad_mode_|check$|"
    r"abi_version|copy_$|clone$)",
]))

OPERATOR_NAMES = {"nw": "new", "na": "new[]", "dl": "delete", "da": "delete[]", "ls": "<<", "rs": ">>",
                  "eq": "==", "ne": "!=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "aS": "=", "pl": "+",
                  "mi": "-", "ml": "*", "dv": "/", "cl": "()", "ix": "[]", "co": "~", "nt": "!", "pt": "->"}
STD_ABBREVIATIONS = {"a": "allocator", "b": "basic_string", "s": "string", "i": "istream", "o": "ostream",
                     "d": "iostream"}


def _source_name(s: str, i: int) -> tuple[str, int] | None:
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    if j == i:
        return None
    size = int(s[i:j])
    if size <= 0 or j + size > len(s):
        return None
    return s[j:j + size], j + size


def _skip_number(s: str, i: int) -> int:
    """A call offset's number (``n`` for negative) and its ``_``."""
    if i < len(s) and s[i] == "n":
        i += 1
    while i < len(s) and s[i].isdigit():
        i += 1
    return i + 1 if i < len(s) and s[i] == "_" else len(s)


def qualified_name(mangled: str) -> str | None:
    """The leading part of an Itanium-mangled name's qualified name, as far as plain names go:
    ``at::_ops::exp::call`` for ``_ZN2at4_ops3exp4callERKNS_6TensorE``, ``c10::Dispatcher::realSingleton``,
    ``at::TensorBase::data_ptr`` (template arguments end it), ``torch::autograd::AutogradMeta`` for its vtable,
    ``c10::ParallelGuard::~ParallelGuard``. None for a C name, or one this reader does not follow."""
    s = mangled
    if not s.startswith("_Z"):
        return None
    i = 2
    if s[i:i + 2] in ("TV", "TI", "TS", "TT", "TH", "TW"):  # vtable, typeinfo (name), VTT; a TLS variable's
        # init function and wrapper
        i += 2
    elif s.startswith("GVZ", i):  # guard variable of a local static: named by its function
        i += 3
    elif s.startswith("Th", i):  # thunks: call offsets, then the function
        i = _skip_number(s, i + 2)
    elif s.startswith("Tv", i):
        i = _skip_number(s, _skip_number(s, i + 2))
    parts = _name(s, i)
    return "::".join(parts) if parts else None


def _name(s: str, i: int) -> list[str]:
    if i >= len(s):
        return []
    if s.startswith("St", i):
        named = _source_name(s, i + 2)
        return ["std", named[0]] if named else ["std"]
    if s[i] == "S" and i + 1 < len(s) and s[i + 1] in STD_ABBREVIATIONS:
        return ["std", STD_ABBREVIATIONS[s[i + 1]]]
    if s[i].isdigit():
        named = _source_name(s, i)
        return [named[0]] if named else []
    if s[i] != "N":
        code = s[i:i + 2]
        return [f"operator {OPERATOR_NAMES[code]}"] if code in OPERATOR_NAMES else []
    i += 1
    while i < len(s) and s[i] in "rVKRO":  # qualifiers of a member function
        i += 1
    parts: list[str] = []
    while i < len(s):
        c = s[i]
        if c.isdigit():
            named = _source_name(s, i)
            if named is None:
                break
            parts.append(named[0])
            i = named[1]
        elif c == "S" and not parts and s.startswith("St", i):
            parts.append("std")
            i += 2
        elif c == "S" and not parts and i + 1 < len(s) and s[i + 1] in STD_ABBREVIATIONS:
            parts += ["std", STD_ABBREVIATIONS[s[i + 1]]]
            i += 2
        elif c == "C" and i + 1 < len(s) and s[i + 1] in "12345" and parts:
            parts.append(parts[-1])
            i += 2
        elif c == "D" and i + 1 < len(s) and s[i + 1] in "012345" and parts:
            parts.append("~" + parts[-1])
            i += 2
        elif c == "B":  # an ABI tag after a name: [abi:cxx11]
            named = _source_name(s, i + 1)
            if named is None:
                break
            i = named[1]
        elif c == "L":
            i += 1
        elif c.islower() and i + 1 < len(s) and s[i:i + 2] in OPERATOR_NAMES:
            parts.append("operator" + OPERATOR_NAMES[s[i:i + 2]])
            i += 2
        else:  # E (the end), template arguments, substitutions, conversions: the name so far
            break
    return parts


def is_torch_name(label: str) -> bool:
    """A qualified C++ name in torch's namespaces, or a C name of torch's bundled libraries."""
    if "::" in label:
        return label.split("::", 1)[0] in TORCH_NAMESPACES
    return label.startswith(tuple(BUNDLED_PREFIXES)) or label.startswith("THP")


def refused(label: str) -> str:
    """Why a kernel library may not import the torch name ``label`` (a qualified name or a C name); "" if it may."""
    if label.startswith("at::_ops::"):
        op = label.split("::")[2] if label.count("::") >= 2 else ""
        if op in builtin_ops.ALLOWED or any(op.startswith(a + "_") for a in builtin_ops.ALLOWED):
            return ""
        return f"the builtin op aten::{op}"
    for pattern, why in REFUSED:
        if pattern.match(label):
            return why
    if ALLOWED.match(label):
        return ""
    for prefix, what in BUNDLED_PREFIXES.items():
        if label.startswith(prefix):
            return f"{what} (torch's bundled libraries: the compute a submission writes itself)"
    return OUTSIDE


def forbidden_symbol(name: str, exported: frozenset[str] = frozenset()) -> str:
    """Why compiled submission code may not import ``name`` ("" when it may). ``exported``: the names torch's
    own libraries define (``elf_symbols.torch_exports``); a name among them is torch's whatever its spelling."""
    name = name.split("@", 1)[0]
    for prefix, why in FORBIDDEN_C_PREFIXES.items():
        if name.startswith(prefix):
            return why
    label = qualified_name(name) if name.startswith("_Z") else name
    if label is None:  # a C++ name this reader does not follow: torch's if it names torch at all
        if any(f"{len(ns)}{ns}" in name for ns in ("at", "c10", "torch", "caffe2")) or name in exported:
            return f"a torch name the scan cannot read ({OUTSIDE})"
        return ""
    top = label.split("::", 1)[0]
    if top in SYSTEM_NAMESPACES or (label == name and DEVICE_RUNTIME.match(name)):
        return ""
    if not (is_torch_name(label) or name in exported):
        return ""
    return refused(label)
