"""The static scan's C/C++/CUDA rules: regular expressions over the comment-stripped text of each source.

ATen and torch compute (``at::exp``, ``at::_ops::*``, tensor-method compute, ``ATen/ops`` includes), vendor math
libraries, threads and processes, clocks and symbol interposition, exits, casts to low precision, writes
outside the tree and embedded Python; docs/security.md lists them.
"""

from __future__ import annotations

import re

from pytest_cannbench.guard.scan_hits import Collector, Rule, regex_scan, rx
from pytest_cannbench.guard.scan_names import (
    ALLOWED_NAMES,
    CPP_AMBIGUOUS_METHODS,
    NN_CONTAINERS,
    is_compute_name,
    is_method_compute,
)


def _cpp_aten(m: re.Match[str]) -> bool:
    ns, name = m.group(1) or "", m.group(2)
    if name in ALLOWED_NAMES:
        return False
    if ns.startswith(("_ops::", "native::")) or ns in ("nn::functional::", "linalg::", "special::", "fft::"):
        return True
    if ns == "nn::":
        return name[:1].isupper() and name not in NN_CONTAINERS
    return ns in ("", "cpu::", "cuda::", "compositeexplicitautograd::", "compositeimplicitautograd::") \
        and is_compute_name(name)


def _cpp_method(m: re.Match[str]) -> bool:
    return is_method_compute(m.group(1), CPP_AMBIGUOUS_METHODS)


def _include_compute(m: re.Match[str]) -> bool:
    return is_compute_name(m.group(1))


_PROBE_RX = rx(r"pytest|cannbench|golden|kernel_eval|cases\.ya?ml|proto\.ya?ml|_profiler_enabled", re.IGNORECASE)

CPP_RULES: tuple[Rule, ...] = (
    ("aten_call", rx(r"\b(?:at|torch)::((?:\w+::)*?)(\w+)\s*(?:\(|::call\b|::redispatch\b)"), _cpp_aten),
    ("aten_call", rx(r"\b(?:at|torch)::((?:native|_ops)::)(\w+)"), _cpp_aten),
    ("aten_call", rx(r"(?:\.|->)\s*(\w+)\s*\("), _cpp_method),
    ("aten_call", rx(r"#\s*include\s*[<\"]ATen/ops/(\w+?)(?:_native|_ops|_cpu_dispatch)?\.h[>\"]"),
     _include_compute),
    ("aten_call", rx(r"\b(?:cblas_\w+|[sdhc]gemm_?\b|cublas\w*|cudnn\w*|aclnn\w*|mkl_\w+|dnnl_\w+)"), None),
    ("cpp_thread", rx(r"\bstd::(?:j?thread|async)\b|\bpthread_create\b|\bv?fork\s*\(|\bsystem\s*\(|\bpopen\s*\("
                      r"|\bexec[lv]p?e?\s*\(|\bposix_spawnp?\b|\bcudaStreamCreate\w*|\baclrtCreateStream\w*"), None),
    ("cpp_timing", rx(r"\b(?:clock_gettime|gettimeofday|dlsym|RTLD_NEXT|LD_PRELOAD|mprotect|cudaEventElapsedTime"
                      r"|aclrtEventElapsedTime)\b"), None),
    ("ctypes", rx(r"\bdlopen\b"), None),
    ("os_exit", rx(r"(?<![\w.:>])(?:std::)?(?:_exit|_Exit|quick_exit|exit)\s*\("), None),
    ("harness_probe", _PROBE_RX, None),
    ("precision_cast", rx(r"\b__float2(?:half|bfloat16)\w*|static_cast<\s*(?:c10::|at::)?(?:Half|BFloat16|__half"
                          r"|__nv_bfloat16|half)\s*>|(?:\.|->)\s*(?:half|bfloat16)\s*\(\s*\)"
                          r"|\.to\s*\(\s*(?:at|torch|c10)::(?:kHalf|kBFloat16|kChar)\b|fast[-_]?math"), None),
    ("file_write_outside", rx(r"\bf?open\s*\(\s*\"(?:/|[^\"]*\.\./)[^\"]*\"\s*,\s*(?:\"[^\"]*[wa+]|O_)"
                              r"|\bremove\s*\(\s*\"|\bunlink\s*\(|\brmdir\s*\(|std::filesystem::remove"), None),
    ("dynamic_code", rx(r"\bPyRun_\w+|\bPy_CompileString\w*|\bPyImport_ImportModule\w*"), None),
)

def strip_c_comments(text: str) -> str:
    """``text`` with ``//`` and ``/* */`` comments blanked (newlines kept, so line numbers hold); strings kept."""
    out: list[str] = []
    i, n = 0, len(text)
    state = None  # None, '"', "'", "//", "/*"
    while i < n:
        c = text[i]
        if state is None:
            if c == "/" and i + 1 < n and text[i + 1] in "/*":
                state = "/" + text[i + 1]
                out.append("  ")
                i += 2
                continue
            if c in "\"'":
                state = c
            out.append(c)
        elif state in ("\"", "'"):
            if c == "\\" and i + 1 < n:
                out.append(text[i:i + 2])
                i += 2
                continue
            if c == state or c == "\n":
                state = None
            out.append(c)
        elif state == "//":
            if c == "\n":
                state = None
                out.append(c)
            else:
                out.append(" ")
        else:  # block comment
            if c == "*" and i + 1 < n and text[i + 1] == "/":
                state = None
                out.append("  ")
                i += 2
                continue
            out.append("\n" if c == "\n" else " ")
        i += 1
    return "".join(out)


def scan_cpp(text: str, out: Collector) -> None:
    """Scan one C/C++/CUDA source; comments are blanked first, so line numbers hold."""
    regex_scan(strip_c_comments(text).splitlines(), CPP_RULES, out)
