"""Read one operator directory (``proto.yaml`` + ``cases.yaml`` + ``golden.py``) into typed specs.

Only pure Python and PyYAML: collection runs on every xdist worker and must
stay cheap, so nothing here imports torch or executes the golden. Problems are
reported as :class:`TaskFormatError` (the operator cannot be graded at all) or
as per-case errors and warnings that name the file, the case and the field.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import REQUIRED_FILES
from pytest_cannbench.taskformat.dtypes import KNOWN_DTYPES, canonical_dtype
from pytest_cannbench.taskformat.errors import CaseFormatError, TaskFormatError
from pytest_cannbench.taskformat.inputs import plan_inputs
from pytest_cannbench.taskformat.perf_model import PerfModel, parse_perf_model
from pytest_cannbench.taskformat.yaml_load import load_yaml
from pytest_cannbench.vocab.casekey import CaseKey

# a multi-rank (MC2) operator's golden hooks: the distributed truth (required), each rank's inputs, the candidate's call
MC2_GOLDEN, MC2_INPUTS, MC2_CALL = "mc2_distributed_golden", "mc2_make_rank_inputs", "mc2_call_candidate"
MC2_HOOKS = (MC2_GOLDEN, MC2_INPUTS, MC2_CALL)
MAX_WORLD_SIZE = 64
CASE_KEYS = ("operator", "case_id", "input_shape", "dtype", "attrs", "value_range", "note")
FORBIDDEN_CASE_KEYS = ("baseline_perf_us", "t_hw_us")

# The attr `type` spellings seen in the official tasks, normalised. Anything else is
# accepted with a warning: the harness only uses the declaration for display.
ATTR_TYPES = {
    "float": "float", "double": "float", "float32": "float",
    "int": "int", "int32": "int", "int64": "int", "int64_t": "int", "int32_t": "int",
    "bool": "bool", "boolean": "bool",
    "string": "str", "str": "str",
    "listint": "list_int", "int[]": "list_int", "list[int]": "list_int", "int_list": "list_int",
    "listint64": "list_int",
    "listfloat": "list_float", "float[]": "list_float", "list[float]": "list_float",
    "list_float": "list_float",
    "listbool": "list_bool", "bool[]": "list_bool",
    "tensor": "tensor",
}

_SCHEMA_NAME = re.compile(r"^\s*(\w+)\s*\(")


@dataclass(frozen=True)
class TensorDecl:
    """One proto input or output."""

    name: str
    dtypes: tuple[str, ...]
    optional: bool = False
    is_list: bool = False
    compare: bool = True
    index_gather: dict[str, Any] | None = None
    shape: str = ""  # the declared shape, as text (informative; a multi-rank output's says whether it is gathered)
    # why an index_gather declaration cannot be used (``index_gather: true``): every case fails with it
    index_gather_error: str = ""


@dataclass(frozen=True)
class AttrDecl:
    name: str
    type: str  # normalised spelling, see ATTR_TYPES; the raw one when unknown
    raw_type: str
    has_default: bool
    default: Any = None


@dataclass(frozen=True)
class OperatorSpec:
    """What ``proto.yaml`` declares, normalised."""

    name: str
    function_name: str  # the golden / API function: identifier before "(" in schema, else name.lower()
    schema: str
    category: str
    difficulty: str
    inputs: tuple[TensorDecl, ...]
    outputs: tuple[TensorDecl, ...]
    attrs: tuple[AttrDecl, ...]
    precision_thresholds: dict[str, float]
    perf_model: PerfModel | None = None  # our proto extension (bytes and FLOPs of a case), or None

    @property
    def input_names(self) -> list[str]:
        return [d.name for d in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [d.name for d in self.outputs]


@dataclass
class CaseSpec:
    """One entry of ``cases.yaml``. ``error`` set means the case cannot run; it still becomes an item."""

    index: int  # position in the file, for messages when case_id itself is broken
    case_id: int | None
    raw: dict[str, Any]
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # each labelled with the file and the case
    # the same warnings without the label, (case_id or None for the file's own, message): what the operator's
    # one collection warning folds together (:func:`operator_warning`)
    notes: list[tuple[int | None, str]] = field(default_factory=list)

    @property
    def world_size(self) -> int | None:
        """A multi-rank (MC2) case's rank count: ``attrs.mc2_distributed`` true, ``world_size`` (or
        ``ep_world_size``) ranks, as the official runner reads them; None for a single-process case."""
        attrs = self.attrs
        if not attrs.get("mc2_distributed"):
            return None
        value = attrs.get("world_size", attrs.get("ep_world_size", 1))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def warn(self, label: str, message: str, case_id: int | None = None) -> None:
        self.warnings.append(f"{label}: {message}")
        self.notes.append((case_id, message))

    @property
    def attrs(self) -> dict[str, Any]:
        attrs = self.raw.get("attrs")
        return dict(attrs) if isinstance(attrs, dict) else {}

    @property
    def dtype_names(self) -> list[str]:
        """Distinct dtype names of the case, in order: pytest keywords for ``-k float16``."""
        names: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, (list, tuple)):
                for v in value:
                    walk(v)
            elif isinstance(value, str) and value != "null" and value not in names:
                names.append(value)

        walk(self.raw.get("dtype"))
        return names


@dataclass
class OperatorTask:
    """A parsed operator directory."""

    op_dir: Path
    bench_root: Path
    rel_path: str
    spec: OperatorSpec
    cases: list[CaseSpec]
    warnings: list[str] = field(default_factory=list)
    golden_sha256: str = ""  # golden.py's bytes as collected: the only content a golden worker will run
    # the golden main function's attr parameters, read with ast (None: not readable without running it)
    golden_params: frozenset[str] | None = None
    mc2_hooks: frozenset[str] = frozenset()  # the MC2_HOOKS golden.py defines as functions

    @property
    def level(self) -> int | None:
        """Level from the ``levelN`` directory (what the official scorer sums), else from ``difficulty``."""
        first = self.rel_path.split("/")[0]
        match = re.fullmatch(r"level(\d+)", first)
        if match:
            return int(match.group(1))
        match = re.fullmatch(r"[Ll](\d+)", self.spec.difficulty.strip())
        return int(match.group(1)) if match else None

    def case_key(self, case_id: int) -> str:
        """The official case key, e.g. ``level1/exp_1``: it seeds the inputs and keys the metadata."""
        return str(CaseKey.case(self.rel_path, case_id))

    def result_key_of(self, case: CaseSpec) -> CaseKey:
        """The key results are filed under: the case key, or the file position of a case with no usable id."""
        if case.case_id is not None:
            return CaseKey.case(self.rel_path, case.case_id)
        return CaseKey.position(self.rel_path, case.index)

    def result_key(self, case: CaseSpec) -> str:
        return str(self.result_key_of(case))


# --------------------------------------------------------------------------------------------
# proto.yaml


def _dtype_list(path: Path, where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise TaskFormatError(path, where, f"'dtype' must be a dtype name or a non-empty list, got {value!r}")
    names = []
    for item in value:
        name = canonical_dtype(item) if isinstance(item, str) else None
        if name is None:
            raise TaskFormatError(path, where, f"unknown dtype {item!r}",
                                  f"use one of {', '.join(sorted(KNOWN_DTYPES))}")
        names.append(name)
    return tuple(names)


def _tensor_decls(path: Path, key: str, items: Any, *, outputs: bool) -> tuple[TensorDecl, ...]:
    if not isinstance(items, list) or (not items and outputs):
        raise TaskFormatError(path, f"operator.{key}", f"must be a {'non-empty ' if outputs else ''}list of "
                              "mappings with 'name' and 'dtype'")
    decls, seen = [], set()
    for i, item in enumerate(items):
        where = f"operator.{key}[{i}]"
        if not isinstance(item, dict):
            raise TaskFormatError(path, where, f"must be a mapping, got {type(item).__name__}")
        name = item.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise TaskFormatError(path, where, f"missing or invalid field 'name' ({name!r})",
                                  "give every input and output a Python identifier as name")
        if name in seen:
            raise TaskFormatError(path, where, f"duplicate name {name!r}")
        seen.add(name)
        if "dtype" not in item:
            raise TaskFormatError(path, f"{where} ({name})", "missing field 'dtype'")
        index_gather = item.get("index_gather")
        unusable = ""
        if index_gather is not None and not isinstance(index_gather, dict):
            # bench_lab's top_k_top_p_sample_v2 and moe_init_routing_v3 write `index_gather: true`: the official
            # loader keeps it and its index check then fails on every case; here the operator collects and each
            # case fails as a task error saying what to declare
            unusable = (f"{path}: {where} ({name}): 'index_gather' is {index_gather!r}, not a mapping: nothing says "
                        "which input and dim the index output gathers from, so it cannot be checked (the official "
                        "harness fails on it too); declare {input, dim_attr, value_output} or {input, dim_attr, "
                        "value_reduce}")
            index_gather = None
        if isinstance(index_gather, dict):
            _check_index_gather(path, f"{where} ({name}).index_gather", index_gather)
        decls.append(TensorDecl(
            name=name,
            dtypes=_dtype_list(path, f"{where} ({name})", item["dtype"]),
            optional=bool(item.get("optional", False)),
            is_list=bool(item.get("is_list", False)),
            compare=item.get("compare", True) is not False,
            index_gather=dict(index_gather) if isinstance(index_gather, dict) else None,
            shape=str(item.get("shape") or ""),
            index_gather_error=unusable,
        ))
    return tuple(decls)


def _check_index_gather(path: Path, where: str, spec: dict[str, Any]) -> None:
    for key in ("input", "dim_attr"):
        if not isinstance(spec.get(key), str):
            raise TaskFormatError(path, where, f"missing field {key!r}")
    has_value, has_reduce = "value_output" in spec, "value_reduce" in spec
    if has_value == has_reduce:
        raise TaskFormatError(path, where, "needs exactly one of 'value_output' and 'value_reduce'")
    if has_reduce and spec["value_reduce"] not in ("amax", "amin"):
        raise TaskFormatError(path, where, f"'value_reduce' must be amax or amin, got {spec['value_reduce']!r}")


def _attr_decls(path: Path, items: Any, warnings: list[str]) -> tuple[AttrDecl, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise TaskFormatError(path, "operator.attrs", f"must be a list, got {type(items).__name__}")
    decls = []
    for i, item in enumerate(items):
        where = f"operator.attrs[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise TaskFormatError(path, where, "must be a mapping with a string 'name'")
        raw_type = str(item.get("type", ""))
        key = raw_type.strip().lower().replace(" ", "")
        norm = ATTR_TYPES.get(key)
        if norm is None:
            warnings.append(f"{path}: {where} ({item['name']}): unknown attr type {raw_type!r}, "
                            "kept as declared (attr types are informative only)")
        decls.append(AttrDecl(name=item["name"], type=norm or raw_type, raw_type=raw_type,
                              has_default="default" in item, default=item.get("default")))
    return tuple(decls)


def parse_proto(path: Path, warnings: list[str]) -> OperatorSpec:
    data = load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("operator"), dict):
        raise TaskFormatError(path, "", "top level must be a mapping with the key 'operator'")
    op = data["operator"]
    name = op.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TaskFormatError(path, "operator", "missing field 'name'")
    schema = op.get("schema") or ""
    if not isinstance(schema, str):
        raise TaskFormatError(path, "operator.schema", f"must be a string, got {type(schema).__name__}")
    match = _SCHEMA_NAME.match(schema)
    if schema and not match:
        warnings.append(f"{path}: operator.schema: no function name before '(' in {schema!r}; "
                        f"using {name.lower()!r}")
    thresholds = op.get("precision_thresholds") or {}
    if not isinstance(thresholds, dict):
        raise TaskFormatError(path, "operator.precision_thresholds", "must be a mapping dtype -> threshold")
    clean: dict[str, float] = {}
    for key, value in thresholds.items():
        dtype = canonical_dtype(str(key))
        if dtype is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise TaskFormatError(path, f"operator.precision_thresholds.{key}",
                                  f"expected a known dtype mapped to a number >= 0, got {key!r}: {value!r}")
        clean[dtype] = float(value)
    inputs = _tensor_decls(path, "inputs", op.get("inputs"), outputs=False)
    outputs = _tensor_decls(path, "outputs", op.get("outputs"), outputs=True)
    attrs = _attr_decls(path, op.get("attrs"), warnings)
    perf_model = parse_perf_model(op.get("perf_model"), str(path), inputs=[d.name for d in inputs],
                                  outputs=[d.name for d in outputs], attrs=[a.name for a in attrs])
    return OperatorSpec(
        name=name.strip(),
        function_name=match.group(1) if match else name.strip().lower(),
        schema=schema.strip(),
        category=str(op.get("category") or ""),
        difficulty=str(op.get("difficulty") or ""),
        inputs=inputs,
        outputs=outputs,
        attrs=attrs,
        precision_thresholds=clean,
        perf_model=perf_model,
    )


# --------------------------------------------------------------------------------------------
# golden.py (parsed, never imported here)


def check_golden_source(path: Path, spec: OperatorSpec) -> str:
    """Syntax and the main function's presence, found with ``ast`` so no golden code runs at collection;
    returns the sha256 the golden is pinned to for the session."""
    return read_golden_source(path, spec)[0]


def read_golden_source(path: Path, spec: OperatorSpec) -> tuple[str, frozenset[str] | None, frozenset[str]]:
    """:func:`check_golden_source`, and the main function's attr parameters (what a case's attrs can reach:
    the golden and the candidate are called with its parameters only; those annotated ``Tensor`` take inputs),
    None where ``ast`` cannot tell (the main function is not a plain ``def`` at module level); and which of the
    multi-rank hooks (:data:`MC2_HOOKS`) it defines."""
    try:
        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
    except OSError as exc:
        raise TaskFormatError(path, "", f"cannot read file: {exc.strerror}") from None
    except SyntaxError as exc:
        raise TaskFormatError(path, f"line {exc.lineno}", f"Python syntax error: {exc.msg}",
                              "fix the golden's syntax") from None
    defined = set()
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[node.name] = node
            else:
                functions.pop(node.name, None)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
            for t in node.targets:
                if isinstance(t, ast.Name):
                    functions.pop(t.id, None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    wanted = [spec.function_name, spec.name.lower()]
    if not any(name in defined for name in wanted):
        raise TaskFormatError(path, "", f"defines no golden function {spec.function_name!r}"
                              + (f" or {spec.name.lower()!r}" if spec.name.lower() != spec.function_name else ""),
                              "name the golden after the identifier before '(' in proto.yaml's schema")
    main = next((functions[name] for name in wanted if name in functions), None)
    params = None
    if main is not None and (spec.function_name in functions or spec.function_name not in defined):
        args = main.args  # tensor parameters (annotated ``Tensor``) take inputs, never attrs (golden_binding)
        params = frozenset(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
                           if a.annotation is None or "Tensor" not in ast.unparse(a.annotation))
    return hashlib.sha256(source).hexdigest(), params, frozenset(h for h in MC2_HOOKS if h in functions)


# --------------------------------------------------------------------------------------------
# cases.yaml


def parse_cases(path: Path, spec: OperatorSpec, data: Any = None,
                golden_params: frozenset[str] | None = None) -> list[CaseSpec]:
    """The cases of ``path`` (or of ``data``, already loaded, named by ``path``: generated hidden cases);
    ``golden_params``: the golden main function's parameters, which decide what an undeclared attr means."""
    data = load_yaml(path) if data is None else data
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise TaskFormatError(path, "", "top level must be a mapping with a list under 'cases'")
    if not data["cases"]:
        raise TaskFormatError(path, "cases", "the list is empty", "add at least one case")
    cases: list[CaseSpec] = []
    seen: dict[int, int] = {}
    attr_names = {a.name for a in spec.attrs} | set(spec.input_names)
    for index, raw in enumerate(data["cases"]):
        if not isinstance(raw, dict):
            cases.append(CaseSpec(index, None, {}, error=f"{path}: cases[{index}]: must be a mapping, "
                                                           f"got {type(raw).__name__}"))
            continue
        case_id = raw.get("case_id")
        label = f"{path}: case_id {case_id}" if isinstance(case_id, int) else f"{path}: cases[{index}]"
        case = CaseSpec(index, case_id if isinstance(case_id, int) and not isinstance(case_id, bool) else None, raw)
        cases.append(case)
        if case.case_id is None or case.case_id < 0:
            case.case_id = None
            case.error = f"{label}: field 'case_id' must be a non-negative int, got {case_id!r}"
            continue
        if case.case_id in seen:
            case.error = f"{label}: duplicate case_id (also cases[{seen[case.case_id]}])"
            # The id belongs to the first case: keyed by it, this one would replace that case's
            # outcome in the results (one case lost from every count). It is keyed by position.
            case.case_id = None
            continue
        seen[case.case_id] = index
        operator = raw.get("operator")
        if operator is not None and str(operator) != spec.name:
            case.error = (f"{label}: field 'operator' is {operator!r} but proto.yaml names {spec.name!r}")
            continue
        for key in ("input_shape", "dtype"):
            if key not in raw:
                case.error = f"{label}: missing field {key!r}"
                break
        if case.error:
            continue
        attrs = raw.get("attrs")
        if attrs is not None and not isinstance(attrs, dict):
            case.error = f"{label}: field 'attrs' must be a mapping, got {type(attrs).__name__}"
            continue
        try:
            plan_inputs(spec.input_names, raw["input_shape"], raw["dtype"], raw.get("value_range"))
        except CaseFormatError as exc:
            case.error = f"{label}: {exc}"
            continue
        if case.attrs.get("mc2_distributed") and not 1 <= (case.world_size or 0) <= MAX_WORLD_SIZE:
            given = case.attrs.get("world_size", case.attrs.get("ep_world_size"))
            case.error = (f"{label}: field 'attrs': a multi-rank case (mc2_distributed) needs an int world_size "
                          f"from 1 to {MAX_WORLD_SIZE}, got {given!r}")
            continue
        _case_warnings(case, label, spec, attr_names, golden_params)
    ids = sorted(seen)
    if ids and ids != list(range(ids[0], ids[0] + len(ids))):
        cases[0].warn(str(path), f"case ids are not contiguous ({ids[0]}..{ids[-1]}, {len(ids)} cases)")
    return cases


def _case_warnings(case: CaseSpec, label: str, spec: OperatorSpec, attr_names: set[str],
                   golden_params: frozenset[str] | None) -> None:
    """Suspicious but valid: the case runs, the author is told."""
    raw, cid = case.raw, case.case_id
    for key in FORBIDDEN_CASE_KEYS:
        if key in raw:
            case.warn(label, f"field {key!r} is ignored (anchors live in metadata/<hw>.json)", cid)
    unknown = sorted(k for k in raw if k not in CASE_KEYS and k not in FORBIDDEN_CASE_KEYS)
    if unknown:
        case.warn(label, f"unknown field(s) {', '.join(map(repr, unknown))} ignored", cid)
    _attr_warnings(case, label, attr_names, golden_params)
    shapes = raw.get("input_shape")
    if isinstance(shapes, list) and shapes and isinstance(shapes[0], int):
        case.warn(label, "input_shape is a bare shape, read as [[...]] (one input)", cid)
    ranges = raw.get("value_range")
    if isinstance(ranges, dict):
        case.warn(label, "value_range is a mapping by input name: read as one entry per input (the official "
                         "generator fails on it, KeyError 0); a list in proto.yaml's input order works in both", cid)
    if isinstance(ranges, list) and any(isinstance(r, dict) for r in ranges):
        case.warn(label, "value_range entries that are mappings (such as {name: nd, mean: ..., std: ...}) are no "
                         "range: the official generator draws those inputs from its default range ([0, 1) for "
                         "floats, [0, 100] for integers), and so does this one; write [lo, hi] to mean one", cid)
    dtypes = raw.get("dtype")
    if isinstance(shapes, list) and isinstance(dtypes, list) and shapes and isinstance(shapes[0], list):
        if len(dtypes) not in (1, len(shapes)):
            case.warn(label, f"dtype has {len(dtypes)} entries for {len(shapes)} input shapes", cid)
    allowed = {d.name: set(d.dtypes) for d in spec.inputs}
    if isinstance(dtypes, list) and len(dtypes) == 1 and len(spec.inputs) > 1 and isinstance(dtypes[0], str):
        dtypes = dtypes * len(spec.inputs)  # the shorthand stands for every input
    if isinstance(dtypes, list) and len(dtypes) == len(spec.inputs):
        for decl, value in zip(spec.inputs, dtypes):
            names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            for name in names:
                canon = canonical_dtype(name) if isinstance(name, str) else None
                if canon and canon not in allowed[decl.name]:
                    case.warn(label, f"input {decl.name!r} has dtype {name!r}, not among proto's "
                                     f"{sorted(allowed[decl.name])}", cid)


def _attr_warnings(case: CaseSpec, label: str, attr_names: set[str], golden_params: frozenset[str] | None) -> None:
    """An attr proto.yaml does not declare. The official harness (and this one) hands the golden, and the
    candidate, only the attrs that are parameters of the golden's main function: any other attr is the case's
    own description (bench_lab's ``batch_size``, ``seq_len``, ``case_name`` ...), allowed by the format and said
    nothing of, unless its name is close to a parameter's (a typo, which would leave that parameter at its
    default). An attr the golden takes but proto.yaml does not declare reaches the candidate undocumented."""
    extra = sorted(k for k in case.attrs if k not in attr_names)
    if not extra:
        return
    if golden_params is None:  # the golden's parameters are not known without running it
        case.warn(label, f"attrs {', '.join(map(repr, extra))} are not declared in proto.yaml", case.case_id)
        return
    taken = [k for k in extra if k in golden_params]
    if taken:
        case.warn(label, f"attrs {', '.join(map(repr, taken))} are not declared in proto.yaml, yet the golden "
                         "takes them and the candidate is called with them: declare them under operator.attrs",
                  case.case_id)
    import difflib

    for name in extra:
        if name in golden_params:
            continue
        close = [p for p in difflib.get_close_matches(name, sorted(golden_params), n=1, cutoff=0.8)
                 if p not in case.attrs]
        if close:
            case.warn(label, f"attr {name!r} is neither declared in proto.yaml nor a golden parameter, so it "
                             f"reaches neither the golden nor the candidate: did you mean {close[0]!r}?", case.case_id)


# --------------------------------------------------------------------------------------------
# the directory


def load_operator(op_dir: Path, bench_root: Path) -> OperatorTask:
    """Parse the three files. Raises :class:`TaskFormatError` when the operator cannot be graded."""
    missing = [name for name in REQUIRED_FILES if not (op_dir / name).is_file()]
    if missing:
        raise TaskFormatError(op_dir, "", f"missing {', '.join(missing)}",
                              "an operator directory needs proto.yaml, cases.yaml and golden.py")
    warnings: list[str] = []
    spec = parse_proto(op_dir / "proto.yaml", warnings)
    golden_sha256, golden_params, mc2_hooks = read_golden_source(op_dir / "golden.py", spec)
    cases = parse_cases(op_dir / "cases.yaml", spec, golden_params=golden_params)
    unusable = next((d.index_gather_error for d in spec.outputs if d.index_gather_error), "")
    for case in cases:
        if case.error is None and unusable:
            case.error = f"{unusable} (case_id {case.case_id})"
        if case.error is None and case.attrs.get("mc2_distributed") and MC2_GOLDEN not in mc2_hooks:
            case.error = (f"{op_dir / 'cases.yaml'}: case_id {case.case_id}: a multi-rank case (mc2_distributed) but "
                          f"{op_dir / 'golden.py'} defines no {MC2_GOLDEN}(ctx, inputs, attrs), the truth of each rank")
    rel_path = op_dir.relative_to(bench_root).as_posix() if op_dir != bench_root else op_dir.name
    return OperatorTask(op_dir=op_dir, bench_root=bench_root, rel_path=rel_path, spec=spec, cases=cases,
                        warnings=warnings, golden_sha256=golden_sha256, golden_params=golden_params,
                        mc2_hooks=mc2_hooks)
