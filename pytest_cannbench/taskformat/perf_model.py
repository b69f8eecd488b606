"""``perf_model``: how much work a case does, for the roofline limit where no metadata exists.

Our extension to ``proto.yaml`` (the official harness ignores unknown keys under ``operator``)::

    operator:
      perf_model:
        bytes: "<expr>"   # bytes that must cross memory; default: every input's and output's nbytes
        flops: "<expr>"   # arithmetic operations; default: none (a memory-bound roofline)

Each field is optional. Expressions are parsed with :mod:`ast` and interpreted by a whitelist,
never passed to ``eval``: a task file is data, and a proto from an untrusted suite must not run
code in the judge. Syntax, names and constant parts are checked at collection, so a typo fails the
operator before any case runs.

Grammar::

    expr    := NUMBER | ATTR | fact | call | expr OP expr | -expr | +expr | ( expr )
             | seq [ expr ] | seq [ expr? : expr? ]
    OP      := + | - | * | / | // | % | **       (exponent at most 64 in magnitude)
    fact    := T.numel | T.nbytes | T.itemsize | T.ndim | T.shape | T.count | T[expr].fact
    call    := min(...) | max(...) | sum(...) | prod(...) | len(seq)
    seq     := T.shape | a list-valued ATTR | a slice of one

``T`` is any proto input or output name (outputs' facts come from the reference outputs); ``ATTR``
any proto attr name, valued from the case's ``attrs`` (the caller merges the proto defaults in).
``min``/``max``/``sum``/``prod`` take either several numbers or one sequence. A TensorList ``T``
has ``T.count`` tensors, ``T.numel``/``T.nbytes`` summed over them and ``T[i].shape`` etc. per
tensor; a plain tensor has ``T.count == 1``. An optional input a case omits (given as None)
counts as empty: ``numel``/``nbytes``/``count`` 0, its shape an error. Every intermediate value is bounded
(|v| <= 1e30) so a hostile ``9**9**9`` fails fast instead of hanging collection.

Examples::

    # elementwise add (x, y -> z): read both inputs, write the output
    perf_model: {bytes: "x.nbytes + y.nbytes + z.nbytes", flops: "z.numel"}

    # matmul x[m,k] @ w[k,n] (-> y[m,n]), batch dims folded into m
    perf_model:
      bytes: "x.nbytes + w.nbytes + y.nbytes"
      flops: "2 * prod(x.shape[:-1]) * x.shape[-1] * w.shape[-1]"

    # sum of x over attr `dim` (-> y): n - 1 adds for each of y's elements, n = x.numel / y.numel
    perf_model: {bytes: "x.nbytes + y.nbytes", flops: "x.numel - y.numel"}
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.taskformat.errors import TaskFormatError

FIELDS = ("bytes", "flops")
FACTS = ("numel", "nbytes", "itemsize", "ndim", "shape", "count")
FUNCTIONS = ("min", "max", "sum", "prod", "len")
MAX_CHARS = 2000
MAX_NODES = 400
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e30


class PerfModelError(TaskFormatError):
    """A ``perf_model`` expression that cannot be parsed or evaluated; names the proto file and field."""

    def __init__(self, source: str, field_name: str, problem: str, fix: str = "") -> None:
        super().__init__(Path(source), f"operator.perf_model.{field_name}" if field_name else "operator.perf_model",
                         problem, fix)


@dataclass(frozen=True)
class TensorFacts:
    """Shape and element size of one tensor: all the perf model may know of it (no torch needed)."""

    shape: tuple[int, ...]
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @classmethod
    def of(cls, tensor: Any) -> TensorFacts:
        """Facts of a torch tensor (duck-typed: ``shape`` and ``element_size()``)."""
        return cls(tuple(int(d) for d in tensor.shape), int(tensor.element_size()))


TensorValue = TensorFacts | Sequence[TensorFacts] | None

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class _Invalid(Exception):
    """Raised inside the checker/interpreter; turned into a PerfModelError with source and field."""


# --------------------------------------------------------------------------------------------
# static check (collection time)


class _Checker:
    """Walks the tree once: only whitelisted nodes, known names, facts on tensors only."""

    def __init__(self, tensors: set[str], attrs: set[str]) -> None:
        self.tensors = tensors
        self.attrs = attrs
        self.nodes = 0

    def check(self, node: ast.AST) -> str:
        """Returns the static kind of the node: "num", "seq" or "any" (an attr: number or list)."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Invalid(f"expression too long (more than {MAX_NODES} syntax nodes)")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise _Invalid(f"only numbers are allowed as literals, got {node.value!r}")
            if not abs(node.value) <= MAX_MAGNITUDE:
                raise _Invalid(f"literal out of range (|v| > {MAX_MAGNITUDE:g})")
            return "num"
        if isinstance(node, ast.Name):
            if node.id in self.tensors:
                raise _Invalid(f"{node.id!r} is a tensor: use one of its facts, e.g. {node.id}.nbytes")
            if node.id in self.attrs:
                return "any"
            if node.id in FUNCTIONS:
                raise _Invalid(f"{node.id!r} is a function: call it, e.g. {node.id}(...)")
            raise _Invalid(f"unknown name {node.id!r} (not an input, output or attr of the proto)")
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise _Invalid(f"operator {type(node.op).__name__} is not allowed (use + - * / // % **)")
            for side in (node.left, node.right):
                if self.check(side) == "seq":
                    raise _Invalid("arithmetic on a sequence (a shape or a slice); index it or use sum/prod")
            if isinstance(node.op, ast.Pow):
                exponent = _literal(node.right)
                if exponent is not None and abs(exponent) > MAX_EXPONENT:
                    raise _Invalid(f"exponent {exponent} exceeds {MAX_EXPONENT}")
            return "num"
        if isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise _Invalid(f"operator {type(node.op).__name__} is not allowed")
            if self.check(node.operand) == "seq":
                raise _Invalid("arithmetic on a sequence")
            return "num"
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise _Invalid(f"only the functions {', '.join(FUNCTIONS)} may be called")
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise _Invalid(f"{node.func.id}() takes plain positional arguments only")
            if not node.args:
                raise _Invalid(f"{node.func.id}() needs at least one argument")
            kinds = [self.check(a) for a in node.args]
            if node.func.id == "len" and (len(kinds) != 1 or kinds[0] == "num"):
                raise _Invalid("len() takes one sequence")
            if len(kinds) > 1 and "seq" in kinds:
                raise _Invalid(f"{node.func.id}() takes several numbers or one sequence, not a mix")
            return "num"
        if isinstance(node, ast.Attribute):
            return self._fact(node)
        if isinstance(node, ast.Subscript):
            target = node.value
            if isinstance(target, ast.Name) and target.id in self.tensors:
                self._index(node.slice, allow_slice=False)  # T[i], a TensorList element: needs a fact
                raise _Invalid(f"{target.id}[...] is a tensor: use one of its facts, e.g. {target.id}[0].shape")
            kind = self.check(target)
            if kind == "num":
                raise _Invalid("only a shape or a list attr can be indexed")
            is_slice = self._index(node.slice, allow_slice=True)
            return "seq" if is_slice else "num"
        raise _Invalid(f"{type(node).__name__} is not allowed in a perf_model expression")

    def _fact(self, node: ast.Attribute) -> str:
        if node.attr not in FACTS:
            raise _Invalid(f"unknown fact {node.attr!r} (allowed: {', '.join(FACTS)})")
        base = node.value
        if isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name) and base.value.id in self.tensors:
            self.nodes += 2
            self._index(base.slice, allow_slice=False)
        elif isinstance(base, ast.Name) and base.id in self.tensors:
            self.nodes += 1
        elif isinstance(base, ast.Name) and base.id in self.attrs:
            raise _Invalid(f"{base.id!r} is an attr, not a tensor: .{node.attr} applies to inputs and outputs")
        else:
            raise _Invalid(f".{node.attr} applies to an input or output name, e.g. x.{node.attr}")
        return "seq" if node.attr == "shape" else "num"

    def _index(self, index: ast.AST, allow_slice: bool) -> bool:
        if isinstance(index, ast.Slice):
            if not allow_slice:
                raise _Invalid("a tensor list takes one index, not a slice")
            if index.step is not None:
                raise _Invalid("slices take no step")
            for part in (index.lower, index.upper):
                if part is not None and self.check(part) == "seq":
                    raise _Invalid("a slice bound must be a number")
            return True
        if self.check(index) == "seq":
            raise _Invalid("an index must be a number")
        return False


def _literal(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(node.operand)
        return -inner if inner is not None else None
    return None


# --------------------------------------------------------------------------------------------
# interpreter (run time)


def _bounded(value: Any) -> Any:
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            raise _Invalid("result is not a number")
        if abs(value) > MAX_MAGNITUDE:
            raise _Invalid(f"value out of range (|v| > {MAX_MAGNITUDE:g})")
    return value


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _Invalid(f"{what} must be an integer, got {value!r}")


class _Interpreter:
    def __init__(self, tensors: Mapping[str, TensorValue], attrs: Mapping[str, Any]) -> None:
        self.tensors = tensors
        self.attrs = attrs

    def run(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._attr(node.id)
        if isinstance(node, ast.BinOp):
            left, right = self._num(node.left), self._num(node.right)
            if isinstance(node.op, ast.Pow):
                if abs(right) > MAX_EXPONENT:
                    raise _Invalid(f"exponent {right!r} exceeds {MAX_EXPONENT}")
                if left == 0 and right < 0:
                    raise _Invalid("division by zero (0 ** negative)")
                if left != 0 and right * math.log10(abs(left)) > math.log10(MAX_MAGNITUDE):
                    raise _Invalid(f"value out of range ({left!r} ** {right!r})")
            elif isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise _Invalid("division by zero")
            result = _BINOPS[type(node.op)](left, right)
            if isinstance(result, complex):
                raise _Invalid("negative number to a fractional power")
            return _bounded(result)
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](self._num(node.operand))
        if isinstance(node, ast.Call):
            return self._call(node.func.id, [self.run(a) for a in node.args])  # type: ignore[attr-defined]
        if isinstance(node, ast.Attribute):
            return self._fact(node)
        if isinstance(node, ast.Subscript):
            seq = self.run(node.value)
            if not isinstance(seq, tuple):
                raise _Invalid(f"cannot index {seq!r}")
            if isinstance(node.slice, ast.Slice):
                lower = None if node.slice.lower is None else _as_int(self._num(node.slice.lower), "a slice bound")
                upper = None if node.slice.upper is None else _as_int(self._num(node.slice.upper), "a slice bound")
                return seq[lower:upper]
            return self._item(seq, self._num(node.slice))
        raise _Invalid(f"{type(node).__name__} is not allowed")  # unreachable after the checker

    def _num(self, node: ast.AST) -> int | float:
        value = self.run(node)
        if isinstance(value, bool):
            return int(value)
        if not isinstance(value, (int, float)):
            raise _Invalid(f"expected a number, got {value!r}")
        return value

    @staticmethod
    def _item(seq: tuple[Any, ...], index: Any) -> Any:
        i = _as_int(index, "an index")
        if not -len(seq) <= i < len(seq):
            raise _Invalid(f"index {i} out of range for {seq!r}")
        return seq[i]

    def _attr(self, name: str) -> Any:
        if name not in self.attrs:
            raise _Invalid(f"attr {name!r} has no value in this case (and no proto default was given)")
        value = self.attrs[name]
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, (int, float)):
            return _bounded(value)
        if isinstance(value, (list, tuple)) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return tuple(_bounded(v) for v in value)
        raise _Invalid(f"attr {name!r} is {value!r}, not a number or a list of numbers")

    def _tensor(self, name: str) -> TensorFacts | tuple[TensorFacts, ...] | None:
        if name not in self.tensors:
            raise _Invalid(f"no facts were given for {name!r} (pass None for an optional input the case omits)")
        value = self.tensors[name]
        if value is None or isinstance(value, TensorFacts):
            return value
        return tuple(value)

    def _fact(self, node: ast.Attribute) -> Any:
        base = node.value
        if isinstance(base, ast.Subscript):
            name = base.value.id  # type: ignore[attr-defined]
            value = self._tensor(name)
            if not isinstance(value, tuple):
                raise _Invalid(f"{name} is not a tensor list: drop the index")
            facts: Any = self._item(value, self._num(base.slice))
        else:
            name = base.id  # type: ignore[attr-defined]
            facts = self._tensor(name)
        fact = node.attr
        if facts is None:
            if fact in ("numel", "nbytes", "count"):
                return 0
            raise _Invalid(f"{name} is absent in this case: it has no {fact}")
        if isinstance(facts, tuple):
            if fact == "count":
                return len(facts)
            if fact in ("numel", "nbytes"):
                return sum(getattr(f, fact) for f in facts)
            sizes = {f.itemsize for f in facts}
            if fact == "itemsize" and len(sizes) == 1:
                return sizes.pop()
            raise _Invalid(f"{name} is a tensor list: use {name}[i].{fact}")
        if fact == "count":
            return 1
        if fact == "shape":
            return tuple(facts.shape)
        return _bounded(getattr(facts, fact))

    @staticmethod
    def _call(name: str, args: list[Any]) -> Any:
        if name == "len":
            if not isinstance(args[0], tuple):
                raise _Invalid("len() takes a sequence")
            return len(args[0])
        values = args[0] if len(args) == 1 and isinstance(args[0], tuple) else args
        for v in values:
            if isinstance(v, tuple):
                raise _Invalid(f"{name}() takes numbers")
        values = [int(v) if isinstance(v, bool) else v for v in values]
        if name in ("min", "max"):
            if not values:
                raise _Invalid(f"{name}() of an empty sequence")
            return min(values) if name == "min" else max(values)
        if name == "sum":
            return _bounded(sum(values))
        result: int | float = 1
        for v in values:
            result = _bounded(result * v)
        return result


# --------------------------------------------------------------------------------------------
# public API


@dataclass(frozen=True)
class PerfModel:
    """A parsed ``perf_model``; a field left None takes the default (all tensor bytes / no flops)."""

    source: str
    bytes_expr: str | None = None
    flops_expr: str | None = None
    _trees: dict[str, ast.Expression] = field(default_factory=dict, compare=False, repr=False)

    def evaluate(self, tensors: Mapping[str, TensorValue], attrs: Mapping[str, Any]
                 ) -> tuple[float | None, float | None]:
        """``(bytes, flops)`` of one case; raises :class:`PerfModelError` naming the file and field.

        ``tensors`` maps every input and output name to its facts (a list for a TensorList, None for
        an optional input the case omits); ``attrs`` are the case's attrs over the proto defaults.
        """
        results: dict[str, float | None] = {}
        for name in FIELDS:
            tree = self._trees.get(name)
            if tree is None:
                results[name] = default_bytes(tensors) if name == "bytes" else None
                continue
            try:
                value = _Interpreter(tensors, attrs).run(tree.body)
            except _Invalid as exc:
                raise PerfModelError(self.source, name, str(exc)) from None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PerfModelError(self.source, name, f"evaluates to {value!r}, not a number")
            if not math.isfinite(value) or value < 0:
                raise PerfModelError(self.source, name, f"evaluates to {value!r}; must be a finite number >= 0")
            results[name] = float(value)
        return results["bytes"], results["flops"]


def default_bytes(tensors: Mapping[str, TensorValue]) -> float:
    """Every given tensor read or written once: the sum of all inputs' and outputs' nbytes."""
    total = 0
    for value in tensors.values():
        if value is None:
            continue
        if isinstance(value, TensorFacts):
            total += value.nbytes
        else:
            total += sum(f.nbytes for f in value)
    return float(total)


def estimate_work(model: PerfModel | None, tensors: Mapping[str, TensorValue], attrs: Mapping[str, Any]
                  ) -> tuple[float | None, float | None]:
    """``(bytes, flops)`` with the default model when the proto declares none."""
    if model is None:
        return default_bytes(tensors), None
    return model.evaluate(tensors, attrs)


def _compile(text: str, source: str, name: str, tensors: set[str], attrs: set[str]) -> ast.Expression:
    if len(text) > MAX_CHARS:
        raise PerfModelError(source, name, f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise PerfModelError(source, name, f"syntax error in {_quote(text)}: {exc.msg}",
                             "write an arithmetic expression over numbers, attrs and tensor facts") from None
    except (ValueError, RecursionError, MemoryError):
        raise PerfModelError(source, name, "expression cannot be parsed (too deeply nested or a null byte)") from None
    try:
        kind = _Checker(tensors, attrs).check(tree.body)
    except _Invalid as exc:
        raise PerfModelError(source, name, f"{exc} in {_quote(text)}") from None
    except RecursionError:
        raise PerfModelError(source, name, "expression too deeply nested") from None
    if kind == "seq":
        raise PerfModelError(source, name, f"{_quote(text)} is a sequence, not a number",
                             "wrap it in sum(...) or prod(...)")
    for node in ast.walk(tree.body):  # constant parts fail now, not at the first case (2**10**10, 1/0)
        if isinstance(node, (ast.BinOp, ast.Call)) and _is_constant(node):
            try:
                _Interpreter({}, {}).run(node)
            except _Invalid as exc:
                raise PerfModelError(source, name, f"{exc} in {_quote(text)}") from None
    return tree


def _quote(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


def _is_constant(node: ast.AST) -> bool:
    """No attr, tensor or subscript below ``node``: its value is known at collection."""
    called = {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    return not any(isinstance(sub, (ast.Attribute, ast.Subscript))
                   or (isinstance(sub, ast.Name) and id(sub) not in called) for sub in ast.walk(node))


def parse_perf_model(raw: Any, source: str, *, inputs: Iterable[str] = (), outputs: Iterable[str] = (),
                     attrs: Iterable[str] = ()) -> PerfModel | None:
    """The ``operator.perf_model`` mapping of a proto, checked; None when the proto declares none.

    ``source`` names the proto file in errors; ``inputs``/``outputs``/``attrs`` are the proto's
    names, the only ones an expression may use. A field may also be a plain number.
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PerfModelError(source, "", f"must be a mapping with 'bytes' and/or 'flops', got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise PerfModelError(source, "", f"unknown key(s) {', '.join(map(repr, unknown))}", "use 'bytes' and 'flops'")
    if not raw:
        raise PerfModelError(source, "", "is empty", "give 'bytes' and/or 'flops', or remove it")
    tensor_names = set(inputs) | set(outputs)
    attr_names = set(attrs) - tensor_names
    texts: dict[str, str | None] = {}
    trees: dict[str, ast.Expression] = {}
    for name in FIELDS:
        value = raw.get(name)
        if value is None:
            texts[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise PerfModelError(source, name, f"must be an expression string or a number, got {value!r}")
        text = value if isinstance(value, str) else repr(value)
        trees[name] = _compile(text, source, name, tensor_names, attr_names)
        texts[name] = text
    return PerfModel(source=source, bytes_expr=texts["bytes"], flops_expr=texts["flops"], _trees=trees)
