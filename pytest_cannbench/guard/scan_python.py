"""The static scan's Python rules: an :mod:`ast` walk of each source, resolving names through its imports.

A file that does not parse is scanned line by line with regular expressions instead (and reported as
``syntax_error``). Nothing scanned is imported or executed; docs/security.md lists the rules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from pytest_cannbench.guard.scan_hits import Collector, Rule, regex_scan, rx
from pytest_cannbench.guard.scan_names import (
    PY_AMBIGUOUS_METHODS,
    is_compute_qualname,
    is_method_compute,
)

# ---- qualified-name rules ----------------------------------------------------------------------------------------
# A name matches a pattern if it equals it or extends it by ``.``; a trailing ``*`` matches any continuation.
_QUALNAME_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("frame_walk", ("sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.gettrace",
                    "threading.settrace", "threading.setprofile", "inspect.stack", "inspect.currentframe",
                    "inspect.getouterframes", "inspect.getinnerframes", "inspect.trace", "inspect.getframeinfo",
                    "traceback.walk_stack", "traceback.walk_tb")),
    ("gc_walk", ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "gc.callbacks")),
    ("sys_modules", ("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache", "importlib.reload",
                     "imp.reload", "builtins.__dict__")),
    ("threading", ("threading.Thread", "threading.Timer", "_thread.start_new_thread", "_thread.start_new",
                   "concurrent.futures", "multiprocessing", "torch.multiprocessing", "subprocess", "pty",
                   "os.fork", "os.forkpty", "os.system", "os.popen", "os.spawn*", "os.exec*", "os.posix_spawn*",
                   "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "torch.cuda.Stream",
                   "torch.cuda.stream", "torch.npu.Stream", "torch.npu.stream", "torch_npu.npu.Stream",
                   "torch_npu.npu.stream")),
    ("ctypes", ("ctypes", "_ctypes", "cffi", "_cffi_backend")),
    ("precision_cast", ("torch.autocast", "torch.amp", "torch.cuda.amp", "torch.cpu.amp", "torch.npu.amp",
                        "torch_npu.npu.amp")),
    ("harness_probe", ("pytest", "_pytest", "pytest_cannbench", "cannbench", "kernel_eval", "sys.argv",
                       "sys.orig_argv", "torch._C._autograd._profiler_enabled",
                       "torch.autograd.profiler._is_profiler_enabled")),
    ("host_library", ("numpy", "scipy", "numba", "jax", "jaxlib", "cupy", "tensorflow", "sklearn", "pandas",
                      "torch.from_numpy", "torch.compile", "torch._dynamo", "torch._inductor", "torch.jit",
                      "torch._export", "torch.export")),
    ("os_exit", ("os._exit", "os.abort", "sys.exit", "pytest.exit", "pytest.skip", "pytest.xfail", "pytest.fail",
                 "_pytest.outcomes")),
    ("file_write_outside", ("shutil.rmtree", "os.remove", "os.unlink", "os.rmdir", "os.removedirs", "os.truncate")),
    ("dynamic_code", ("importlib.import_module", "importlib.util.spec_from_file_location",
                      "importlib.util.module_from_spec", "importlib.machinery", "runpy", "marshal.loads",
                      "types.CodeType", "types.FunctionType")),
)

_FRAME_ATTRS = frozenset({"f_back", "f_globals", "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
                          "ag_frame"})
_PROBE_IDENTIFIERS = frozenset({
    "PYTEST_CURRENT_TEST", "_profiler_enabled", "_is_profiler_enabled", "_get_current_dispatch_mode",
    "_get_current_dispatch_mode_stack", "_len_torch_function_stack", "_disable_current_modes",
    "DisableTorchFunction", "DisableTorchFunctionSubclass", "_pop_torch_function_stack",
    "_push_on_torch_function_stack", "_is_torch_function_mode_enabled", "_pop_mode", "_pause_state",
})
_PROBE_WORDS = re.compile(r"pytest|cannbench|golden|kernel_eval", re.IGNORECASE)
_PROBE_STRINGS = re.compile(
    r"pytest|cannbench|golden|kernel_eval|cases\.ya?ml|proto\.ya?ml|_profiler_enabled|eval[-_]seed|--no-perf",
    re.IGNORECASE)
_FAST_MATH = re.compile(r"fast[-_]?math", re.IGNORECASE)

# Timing: assignments to attributes of these (or of anything under them) are timing patches ...
_TIMING_BASES = ("time", "timeit", "torch.cuda", "torch.npu", "torch_npu", "torch.profiler",
                 "torch.autograd.profiler", "torch.utils.benchmark")
# ... and so are assignments to attributes with these names, whatever the object.
_TIMING_ATTRS = frozenset({
    "perf_counter", "perf_counter_ns", "elapsed_time", "synchronize", "monotonic", "monotonic_ns", "process_time",
    "process_time_ns", "thread_time", "thread_time_ns", "time_ns", "default_timer",
})
_TF32_ATTRS = frozenset({"allow_tf32", "allow_fp16_reduced_precision_reduction",
                         "allow_bf16_reduced_precision_reduction"})
_PATCH_DUNDERS = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__", "cell_contents"})
# Roots treated as modules even when this file does not import them (the names a patch would target).
_WELL_KNOWN_MODULES = frozenset({"torch", "torch_npu", "numpy", "sys", "os", "gc", "math", "time", "builtins",
                                 "pytest", "_pytest", "inspect", "importlib"})

_LOW_DTYPES = frozenset({
    "torch.float16", "torch.half", "torch.bfloat16", "torch.int8", "torch.qint8", "torch.quint8", "torch.quint4x2",
    "torch.HalfTensor", "torch.BFloat16Tensor", "torch.CharTensor", "torch.cuda.HalfTensor",
    "torch.cuda.BFloat16Tensor", "torch.cuda.CharTensor", "numpy.float16", "numpy.half", "numpy.int8",
})
_LOW_DTYPE_STRINGS = frozenset({"float16", "half", "bfloat16", "int8", "fp16", "bf16", "torch.float16",
                                "torch.bfloat16", "torch.half", "torch.HalfTensor", "torch.BFloat16Tensor", "f2"})
_ALLOCATION_CALLS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "tensor", "as_tensor", "arange", "rand",
    "randn", "randint", "rand_like", "randn_like", "dtype", "iinfo", "finfo",
})
_WRITE_MODE = re.compile(r"[wax+]")
_OUTSIDE_PATH = re.compile(r"^(?:/|~|\\\\)|(?:^|[/\\])\.\.(?:[/\\]|$)")


def _matches(qualname: str, pattern: str) -> bool:
    if pattern.endswith("*"):
        return qualname.startswith(pattern[:-1])
    return qualname == pattern or qualname.startswith(pattern + ".")


def _qualname_rules(q: str) -> list[str]:
    rules = [rule for rule, patterns in _QUALNAME_RULES if any(_matches(q, p) for p in patterns)]
    if is_compute_qualname(q):
        rules.append("builtin_compute")
    return rules


def _dotted(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    parts.reverse()
    return parts


def _str_const(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


# ---- the ast scanner ---------------------------------------------------------------------------------------------

class _PyScanner:
    """Resolves names through the file's imports, then checks every node against the rules."""

    def __init__(self, tree: ast.AST, out: Collector, own_packages: frozenset[str]) -> None:
        self.tree = tree
        self.out = out
        self.own = own_packages
        self.aliases: dict[str, str] = {}  # local name -> the qualified name it was imported as
        self.bound: set[str] = set()  # names the file binds itself (they shadow builtins)
        self.bare_strings: set[int] = set()  # ids of docstrings and other expression-statement strings

    # -- name resolution

    def resolve(self, node: ast.AST) -> str | None:
        parts = _dotted(node)
        if parts is None:
            return None
        root = parts[0]
        if root in self.aliases:
            parts[0] = self.aliases[root]
        elif root == "F" and root not in self.bound:
            parts[0] = "torch.nn.functional"
        return ".".join(parts)

    def _root_is_module(self, node: ast.AST) -> bool:
        """True if ``node`` is a dotted name rooted at an import (or a well-known module name)."""
        parts = _dotted(node)
        if parts is None:
            return False
        root = parts[0]
        if root in self.aliases:
            return not self.aliases[root].startswith(".")
        return root in _WELL_KNOWN_MODULES and root not in self.bound

    def _own(self, qualname: str) -> bool:
        return qualname.startswith(".") or qualname.split(".", 1)[0] in self.own

    def _is_builtin(self, name: str) -> bool:
        return name not in self.aliases and name not in self.bound

    # -- passes

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._collect_import(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound.add(node.id)
            elif isinstance(node, ast.Expr) and _str_const(node.value) is not None:
                self.bare_strings.add(id(node.value))
        for node in ast.walk(self.tree):
            self._visit(node)

    def _collect_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    self.aliases[a.asname] = a.name
                else:
                    root = a.name.split(".", 1)[0]
                    self.aliases[root] = root
            return
        module = "." * node.level + (node.module or "")
        for a in node.names:
            if a.name != "*":
                self.aliases[a.asname or a.name] = f"{module}.{a.name}" if module else a.name

    def _visit(self, node: ast.AST) -> None:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for a in node.names:
                self._module(a.name, getattr(a, "lineno", line))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                self._module(node.module, line)
                for a in node.names:
                    if a.name != "*":
                        self._qualname(f"{node.module}.{a.name}", getattr(a, "lineno", line))
            for a in node.names:
                self._identifier(a.name, getattr(a, "lineno", line))
        elif isinstance(node, ast.Attribute):
            q = self.resolve(node)
            if q is not None:
                self._qualname(q, line)
            self._identifier(node.attr, line)
            if node.attr in _FRAME_ATTRS:
                self.out.add("frame_walk", line)
            if node.attr == "dlopen":
                self.out.add("ctypes", line)
        elif isinstance(node, ast.Name):
            self._name(node, line)
        elif isinstance(node, ast.Call):
            self._call(node, line)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in self.bare_strings:
            self._string(node.value, line)
        elif isinstance(node, ast.Raise):
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in ("SystemExit", "KeyboardInterrupt"):
                self.out.add("os_exit", line)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            self.out.add("builtin_compute", line)
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            self.out.add("builtin_compute", line)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._store(target, line, node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            self._store(node.target, line, node.value)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self._store(target, line, None)

    # -- rule checks

    def _module(self, module: str, line: int) -> None:
        for rule in _qualname_rules(module):
            if rule != "builtin_compute":  # importing torch.nn.functional is not a call
                self.out.add(rule, line)
        self._identifier(module, line)

    def _qualname(self, q: str, line: int) -> None:
        for rule in _qualname_rules(q):
            self.out.add(rule, line)

    def _identifier(self, name: str, line: int) -> None:
        if name in _PROBE_IDENTIFIERS or _PROBE_WORDS.search(name):
            self.out.add("harness_probe", line)

    def _name(self, node: ast.Name, line: int) -> None:
        name = node.id
        self._identifier(name, line)
        if name == "__builtins__":
            self.out.add("sys_modules", line)
        if name in self.aliases:
            self._qualname(self.resolve(node) or name, line)
        elif self._is_builtin(name) and isinstance(node.ctx, ast.Load):
            if name in ("exec", "eval", "compile", "__import__"):
                self.out.add("dynamic_code", line)
            elif name in ("exit", "quit"):
                self.out.add("os_exit", line)

    def _string(self, s: str, line: int) -> None:
        if _PROBE_STRINGS.search(s):
            self.out.add("harness_probe", line)
        if _FAST_MATH.search(s):
            self.out.add("precision_cast", line)

    def _is_low_dtype(self, node: ast.AST) -> bool:
        s = _str_const(node)
        if s is not None:
            return s in _LOW_DTYPE_STRINGS
        q = self.resolve(node)
        return q is not None and (q in _LOW_DTYPES or q.startswith("torch.float8_"))

    def _call(self, node: ast.Call, line: int) -> None:
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        q = self.resolve(func)
        if isinstance(func, ast.Attribute) and not self._root_is_module(func.value):  # a method call
            if is_method_compute(func.attr, PY_AMBIGUOUS_METHODS):
                self.out.add("builtin_compute", line)
            if func.attr == "numpy":
                self.out.add("host_library", line)
            if func.attr in ("half", "bfloat16"):
                self.out.add("precision_cast", line)
            if func.attr in ("unlink", "rmdir"):
                self.out.add("file_write_outside", line)
        if fname in ("to", "type", "astype") and isinstance(func, ast.Attribute):
            if any(self._is_low_dtype(a) for a in node.args) or any(
                    k.arg in ("dtype", None) and self._is_low_dtype(k.value) for k in node.keywords):
                self.out.add("precision_cast", line)
        elif fname not in _ALLOCATION_CALLS:
            if any(k.arg == "dtype" and self._is_low_dtype(k.value) for k in node.keywords):
                self.out.add("precision_cast", line)
        if fname == "set_float32_matmul_precision":
            arg = _str_const(node.args[0]) if node.args else None
            if arg != "highest":
                self.out.add("precision_cast", line)
        if isinstance(func, ast.Name) and self._is_builtin(func.id):
            if func.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
                self._attr_call(func.id, node, line)
            elif func.id == "open":
                self._open(node, line)
            elif func.id == "__import__" and node.args:
                name = _str_const(node.args[0])
                if name:
                    self._module(name, line)
        if q in ("io.open", "codecs.open"):
            self._open(node, line)
        elif q == "os.open":
            self._os_open(node, line)
        elif q == "importlib.import_module" and node.args:
            name = _str_const(node.args[0])
            if name and not name.startswith("."):
                self._module(name, line)
        if isinstance(func, ast.Attribute) and func.attr in ("write_text", "write_bytes", "open", "touch"):
            path = self._path_literal(func.value)
            if path is not None and _OUTSIDE_PATH.search(path):
                mode = _str_const(node.args[0]) if func.attr == "open" and node.args else None
                if func.attr != "open" or (mode is not None and _WRITE_MODE.search(mode)):
                    self.out.add("file_write_outside", line)

    def _attr_call(self, which: str, node: ast.Call, line: int) -> None:
        base = self.resolve(node.args[0])
        name = _str_const(node.args[1])
        if name is not None:
            self._identifier(name, line)
            if name in _FRAME_ATTRS:
                self.out.add("frame_walk", line)
            if base is not None:
                self._qualname(f"{base}.{name}", line)
            if which == "getattr" and not self._root_is_module(node.args[0]) \
                    and is_method_compute(name, PY_AMBIGUOUS_METHODS):
                self.out.add("builtin_compute", line)
        if which in ("setattr", "delattr"):
            self._patch(node.args[0], base, name, line, node.args[2] if len(node.args) > 2 else None)

    def _path_literal(self, node: ast.AST) -> str | None:
        """The leading literal of a path expression: a string, an f-string, ``Path(...)``, ``a / b``, ``join(...)``."""
        for _ in range(32):
            s = _str_const(node)
            if s is not None:
                return s
            if isinstance(node, ast.JoinedStr):
                return _str_const(node.values[0]) if node.values else None
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add)):
                node = node.left
            elif isinstance(node, ast.Call) and node.args:
                q = self.resolve(node.func) or ""
                if q.rpartition(".")[2] not in ("Path", "PurePath", "PosixPath", "join", "abspath", "expanduser",
                                                "realpath", "normpath", "fspath", "str"):
                    return None
                node = node.args[0]
            else:
                return None
        return None

    def _open(self, node: ast.Call, line: int) -> None:
        path_node = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "file"), None)
        mode_node = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "mode"), None)
        mode = _str_const(mode_node) if mode_node is not None else "r"
        path = self._path_literal(path_node) if path_node is not None else None
        if path is not None and _OUTSIDE_PATH.search(path) and (mode is None or _WRITE_MODE.search(mode)):
            self.out.add("file_write_outside", line)

    def _os_open(self, node: ast.Call, line: int) -> None:
        if len(node.args) < 2:
            return
        path = self._path_literal(node.args[0])
        flags = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in ast.walk(node.args[1])}
        if path is not None and _OUTSIDE_PATH.search(path) and flags & {"O_WRONLY", "O_RDWR", "O_CREAT",
                                                                          "O_APPEND", "O_TRUNC"}:
            self.out.add("file_write_outside", line)

    def _store(self, target: ast.AST, line: int, value: ast.AST | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element, line, None)
        elif isinstance(target, ast.Starred):
            self._store(target.value, line, None)
        elif isinstance(target, ast.Attribute):
            self._patch(target.value, self.resolve(target.value), target.attr, line, value)
        elif isinstance(target, ast.Subscript):
            inner = target.value
            if isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
                self._patch(inner.value, self.resolve(inner.value), None, line, value)
            elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "vars" \
                    and inner.args:
                self._patch(inner.args[0], self.resolve(inner.args[0]), None, line, value)

    def _patch(self, base_node: ast.AST, base: str | None, attr: str | None, line: int,
               value: ast.AST | None) -> None:
        """An assignment, ``setattr`` or ``delattr`` of ``<base>.<attr>`` (``attr`` None: not known)."""
        if attr in _TF32_ATTRS:
            if not (isinstance(value, ast.Constant) and value.value is False):
                self.out.add("precision_cast", line)
            return
        timing = attr in _TIMING_ATTRS or (base is not None and (
            any(_matches(base, b) for b in _TIMING_BASES) or (base == "torch" and attr in ("cuda", "npu", "profiler"))))
        if timing:
            self.out.add("timing_patch", line)
            return
        if base is not None and (base in ("builtins", "__builtins__") or base.startswith("__builtins__.")):
            self.out.add("sys_modules", line)
            return
        if attr in _PATCH_DUNDERS:
            self.out.add("monkeypatch", line)
            return
        if base is not None and self._root_is_module(base_node) and not self._own(base) \
                and not base.startswith("torch.backends"):
            self.out.add("monkeypatch", line)


# ---- line rules, for a file ast cannot parse -----------------------------------------------------------------

def _py_method(m: re.Match[str]) -> bool:
    return is_method_compute(m.group(1), PY_AMBIGUOUS_METHODS)


def _py_torch_attr(m: re.Match[str]) -> bool:
    return is_compute_qualname(f"{'torch.nn.functional' if m.group(1) == 'F' else 'torch'}.{m.group(2)}")


_PY_RULES: tuple[Rule, ...] = (
    ("frame_walk", rx(r"\b_getframe\b|_current_frames|\binspect\s*\.\s*(?:stack|currentframe|getouterframes|trace)\b"
                      r"|\.\s*(?:f_back|f_globals|f_locals|tb_frame)\b|\bset(?:trace|profile)\b"), None),
    ("gc_walk", rx(r"\bget_(?:objects|referrers|referents)\b"), None),
    ("sys_modules", rx(r"\bsys\s*\.\s*(?:modules|meta_path|path_hooks)\b|\breload\s*\(|__builtins__"), None),
    ("threading", rx(r"\bthreading\s*\.\s*(?:Thread|Timer)\b|\bconcurrent\.futures\b|\bmultiprocessing\b"
                     r"|\bsubprocess\b|\bpty\b|\bos\s*\.\s*(?:fork|forkpty|system|popen|spawn\w*|exec\w*)\b"
                     r"|\b_thread\b"), None),
    ("ctypes", rx(r"\bctypes\b|\bcffi\b|\bdlopen\b"), None),
    ("timing_patch", rx(r"(?:\btime\s*\.\s*\w+|\b(?:perf_counter\w*|elapsed_time|synchronize|monotonic\w*))"
                        r"\s*=(?!=)|\bsetattr\s*\(\s*(?:time|torch\s*\.\s*(?:cuda|npu|profiler))\b"
                        r"|\btorch\s*\.\s*(?:cuda|npu|profiler)[\w.]*\s*=(?!=)"), None),
    ("precision_cast", rx(r"\.\s*(?:half|bfloat16)\s*\(\s*\)|\btorch\s*\.\s*(?:float16|half|bfloat16|int8|float8\w*)"
                          r"\b|\bautocast\b|allow_tf32|fast[-_]?math"), None),
    ("harness_probe", rx(r"pytest|cannbench|golden|kernel_eval|cases\.ya?ml|proto\.ya?ml|_profiler_enabled"
                         r"|\bsys\s*\.\s*argv\b|_disable_current_modes|DisableTorchFunction"
                         r"|_torch_function_stack|_get_current_dispatch_mode", re.IGNORECASE), None),
    ("builtin_compute", rx(r"\b(torch|F)\s*\.\s*(\w+)\s*\("), _py_torch_attr),
    ("builtin_compute", rx(r"\btorch\s*\.\s*(?:ops\s*\.\s*aten|nn\s*\.\s*functional|linalg|special|fft)\s*\.\s*\w+"),
     None),
    ("builtin_compute", rx(r"\.\s*(\w+)\s*\("), _py_method),
    ("builtin_compute", rx(r"^(?!\s*@).*?[\w)\]]\s*@=?\s*[\w(]"), None),  # a @ b, not a decorator
    ("host_library", rx(r"^\s*(?:import|from)\s+(?:numpy|scipy|numba|jax|jaxlib|cupy|tensorflow|sklearn|pandas)\b"
                        r"|\btorch\s*\.\s*(?:compile|_dynamo|_inductor|jit|_export|export|from_numpy)\b"
                        r"|\.\s*numpy\s*\(\s*\)"), None),
    ("os_exit", rx(r"\bos\s*\.\s*(?:_exit|abort)\b|\bsys\s*\.\s*exit\b|\bpytest\s*\.\s*(?:exit|skip|xfail|fail)\b"
                   r"|\braise\s+(?:SystemExit|KeyboardInterrupt)\b|^\s*(?:exit|quit)\s*\("), None),
    ("file_write_outside", rx(r"\bopen\s*\(\s*[rbfuRBFU]*[\"'](?:/|~|[^\"']*\.\.[/\\])[^\"']*[\"']\s*,\s*"
                              r"(?:mode\s*=\s*)?[rbfuRBFU]*[\"'][^\"']*[wax+]"
                              r"|\bshutil\s*\.\s*rmtree\b|\bos\s*\.\s*(?:remove|unlink|rmdir|removedirs|truncate)\b"),
     None),
    ("monkeypatch", rx(r"\b(?:torch|np|numpy|builtins|sys|os|gc|math)(?:\s*\.\s*\w+)+\s*=(?!=)"
                       r"|\.\s*(?:__code__|__defaults__|__kwdefaults__|cell_contents)\s*=(?!=)"), None),
    ("dynamic_code", rx(r"(?<![\w.])(?:exec|eval|compile|__import__)\s*\(|\bimport_module\b|\brunpy\b|\bmarshal\b"
                        r"|spec_from_file_location"), None),
)


def _strip_py_comment(line: str) -> str:
    """``line`` without its ``#`` comment (a ``#`` inside a string literal stays)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return line[:i]
        i += 1
    return line


def scan_python(path: str, raw: bytes, lines: list[str], out: Collector, own_packages: Iterable[str] = ()) -> None:
    """Scan one Python source (``raw``, split into ``lines``); ``own_packages`` are the tree's own top-level names."""
    try:
        tree = ast.parse(raw, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        line = getattr(exc, "lineno", None) or 0
        out.add("syntax_error", line, f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc or 'parser limit'}")
        regex_scan([_strip_py_comment(x) for x in lines], _PY_RULES, out)
        return
    try:
        _PyScanner(tree, out, frozenset(own_packages)).run()
    except RecursionError as exc:  # a pathological tree; the ast walk itself is iterative
        out.add("syntax_error", 0, f"RecursionError: {exc}")
        regex_scan([_strip_py_comment(x) for x in lines], _PY_RULES, out)
