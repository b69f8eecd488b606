"""Which torch names the static scan counts as compute a submission should implement itself, and which it passes.

The passed names come from :mod:`builtin_ops`, the runtime guard's allowlist, so the scan and the verdict agree
on what allocation, views and copies are; the few deliberate differences are listed below with their reason.
"""

from __future__ import annotations

from pytest_cannbench.guard.builtin_ops import ALLOWED as RUNTIME_ALLOWED

# The torch operations a submission is supposed to implement itself. ``torch.<name>``, ``torch.Tensor.<name>``, a
# tensor method ``.<name>(`` (Python) and ``at::<name>(``/``torch::<name>(``/``.<name>(`` (C/C++) are flagged when the
# name, or the name without a trailing in-place ``_``, is listed. The list is deliberately broad: a false hit costs a
# look, a miss costs nothing but is caught by the runtime profiler audit anyway.
COMPUTE_NAMES = frozenset({
    # elementwise
    "abs", "absolute", "acos", "acosh", "addcdiv", "addcmul", "angle", "arccos", "arccosh", "arcsin", "arcsinh",
    "arctan", "arctan2", "arctanh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "clamp", "clamp_max",
    "clamp_min", "clip", "cos", "cosh", "deg2rad", "digamma", "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "fix",
    "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "logaddexp", "logaddexp2", "logit", "nan_to_num",
    "neg", "negative", "polygamma", "rad2deg", "reciprocal", "round", "rsqrt", "sgn", "sigmoid", "sign", "signbit",
    "sin", "sinc", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "xlogy", "i0",
    # activations
    "celu", "elu", "gelu", "glu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "logsigmoid",
    "mish", "prelu", "relu", "relu6", "rrelu", "selu", "silu", "softplus", "softshrink", "softsign", "tanhshrink",
    "threshold",
    # binary, comparison, logical
    "add", "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor",
    "copysign", "div", "divide", "eq", "float_power", "floor_divide", "fmax", "fmin", "fmod", "ge", "greater",
    "greater_equal", "gt", "heaviside", "hypot", "isclose", "isfinite", "isinf", "isnan", "le", "lerp", "less",
    "less_equal", "logical_and", "logical_not", "logical_or", "logical_xor", "lt", "maximum", "minimum", "mul",
    "multiply", "ne", "not_equal", "pow", "remainder", "rsub", "sub", "subtract", "true_divide", "where",
    # reductions, scans, sorting, selection
    "amax", "amin", "aminmax", "argmax", "argmin", "argsort", "count_nonzero", "cummax", "cummin", "cumprod",
    "cumsum", "cumulative_trapezoid", "histc", "histogram", "kthvalue", "logcumsumexp", "logsumexp", "max", "mean",
    "median", "min", "mode", "msort", "nanmean", "nanmedian", "nanquantile", "nansum", "norm", "prod", "quantile",
    "sort", "std", "std_mean", "sum", "topk", "trapezoid", "trapz", "unique", "unique_consecutive", "var",
    "var_mean", "bincount", "searchsorted", "bucketize", "nonzero", "diff",
    # linear algebra and convolution
    "addbmm", "addmm", "addmv", "addr", "baddbmm", "bilinear", "bmm", "cdist", "chain_matmul", "cholesky",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution", "cross",
    "det", "dist", "dot", "einsum", "ger", "inner", "inverse", "kron", "linear", "matmul", "mm", "mv", "outer",
    "pdist", "pinverse", "tensordot", "vdot", "svd", "qr",
    # nn
    "_log_softmax", "_softmax", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm", "binary_cross_entropy",
    "cosine_similarity", "cross_entropy", "ctc_loss", "dropout", "embedding", "embedding_bag", "grid_sampler",
    "group_norm", "instance_norm", "interpolate", "kl_div", "l1_loss", "layer_norm", "log_softmax", "max_pool1d",
    "max_pool2d", "max_pool3d", "mse_loss", "native_batch_norm", "native_layer_norm", "nll_loss", "normalize",
    "one_hot", "pairwise_distance", "pixel_shuffle", "rms_norm", "scaled_dot_product_attention", "softmax",
    "softmin",
    # indexing, scatter/gather and data movement that is a kernel of its own
    "cat", "concat", "concatenate", "flip", "fliplr", "flipud", "gather", "hstack", "index_add", "index_copy",
    "index_fill", "index_put", "index_reduce", "index_select", "masked_fill", "masked_scatter", "masked_select",
    "repeat", "repeat_interleave", "roll", "rot90", "scatter", "scatter_add", "scatter_reduce", "stack",
    "take_along_dim", "tile", "tril", "triu", "vstack",
})

# Where the scan and the runtime allowlist differ, on purpose:
# - FLAGGED_COPIES are copies the runtime allows (a submission may assemble its outputs with them) that the scan
#   still flags: concatenation is a kernel of its own, and a hit is only something to look at.
# - SCAN_ALSO_PASSES compute nothing from the inputs: attributes (``device``, ``data_ptr``, ``storage_offset``),
#   the dispatcher's overload name (``torch.ops.aten.empty.default``), constructors (``tensor``, ``as_tensor``,
#   ``arange``) and ``reshape_as`` (a view). The runtime allowlist is for verdicts and lists only ATen's op
#   names; ``aten::arange`` and ``aten::reshape_as`` under a candidate call still count as builtin compute there.
FLAGGED_COPIES = frozenset({"cat", "stack"})
SCAN_ALSO_PASSES = frozenset({"arange", "as_tensor", "tensor", "device", "data_ptr", "storage_offset", "default",
                              "reshape_as"})

# Allocation, view, copy and metadata names: never flagged, even inside namespaces where everything else is
# compute (``torch.ops.aten.empty``, ``at::native::empty_like``).
ALLOWED_NAMES = (RUNTIME_ALLOWED - FLAGGED_COPIES) | SCAN_ALSO_PASSES
assert not COMPUTE_NAMES & ALLOWED_NAMES
assert FLAGGED_COPIES <= COMPUTE_NAMES & RUNTIME_ALLOWED

# Method names that are also common non-tensor methods in Python (set.add, re.sub, logger.log, list.sort,
# queue.put...): as ``.<name>(`` with an unknown receiver they are not flagged (their in-place forms are).
PY_AMBIGUOUS_METHODS = frozenset({"add", "sub", "log", "sort", "fix", "normalize"})
CPP_AMBIGUOUS_METHODS = frozenset({"sort", "fix"})

# Namespaces in which every callable except ALLOWED_NAMES is compute.
_COMPUTE_NAMESPACES = (
    "torch.nn.functional", "torch.ops.aten", "torch.ops.prims", "torch._ops.ops.aten", "torch._C._nn",
    "torch._C._linalg", "torch._C._special", "torch._C._fft", "torch.linalg", "torch.special", "torch.fft",
    "torch._refs", "torch._prims", "torch._decomp", "torch.sparse",
)
# Owners whose attribute ``<name>`` is compute when the name is in COMPUTE_NAMES.
_COMPUTE_OWNERS = frozenset({
    "torch", "torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch._C._VariableFunctions",
})
# torch.nn classes that hold no compute of their own.
NN_CONTAINERS = frozenset({
    "Module", "Parameter", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Sequential", "Identity",
    "Buffer",
})


def is_compute_name(name: str) -> bool:
    """A listed compute name, or its in-place form (``exp_``)."""
    if name in COMPUTE_NAMES:
        return True
    return name.endswith("_") and not name.endswith("__") and name[:-1] in COMPUTE_NAMES


def is_method_compute(name: str, ambiguous: frozenset[str]) -> bool:
    """``.<name>(`` with an unknown receiver: compute unless the name is also a common non-tensor method."""
    if name in ambiguous:
        return False
    return is_compute_name(name)


def is_compute_qualname(q: str) -> bool:
    """``torch.exp``, ``F.anything``, ``torch.ops.aten.<not allowed>``, ``torch.nn.Conv2d``: Python compute."""
    for ns in _COMPUTE_NAMESPACES:
        if q.startswith(ns + "."):
            name = q[len(ns) + 1:].split(".", 1)[0]
            return bool(name) and name not in ALLOWED_NAMES and not name.startswith("__")
    owner, _, name = q.rpartition(".")
    if owner in _COMPUTE_OWNERS and is_compute_name(name):
        return True
    return owner == "torch.nn" and name[:1].isupper() and name not in NN_CONTAINERS
