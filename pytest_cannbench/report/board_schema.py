"""The JSON Schema of ``leaderboard.json``, generated from its types (:mod:`board`), and the same as Markdown tables.

The package ships the schema as ``report/leaderboard.schema.json`` (:func:`shipped`); ``scripts/board_schema.py``
writes it and the tables in ``docs/leaderboard.md``, and a test fails when either is stale or when a real board
does not validate. A type maps to the schema as its JSON does: a TypedDict is an object with exactly its keys (the
required ones required), ``float`` a number or one of the strings ``"nan"``, ``"inf"``, ``"-inf"`` (the files'
spelling of non-finite numbers), ``Any`` anything; a field's ``Annotated`` text is its description and an enum
class in its metadata lists its values.
"""

from __future__ import annotations

import json
import types
import typing
from enum import Enum
from importlib import resources
from typing import Any

from pytest_cannbench.outcome import FAILURES, FailureType, Status
from pytest_cannbench.report.board import Board
from pytest_cannbench.report.leaderboard import SCHEMA

SCHEMA_FILE = "leaderboard.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
NUMBER = {"description": "a number; the strings nan, inf and -inf stand for the non-finite ones",
          "anyOf": [{"type": "number"}, {"enum": ["nan", "inf", "-inf"]}]}
_SCALARS: dict[Any, dict[str, Any]] = {str: {"type": "string"}, bool: {"type": "boolean"}, int: {"type": "integer"},
                                       type(None): {"type": "null"}, float: {"$ref": "#/$defs/number"}}


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


def _type(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one type hint; TypedDicts go to ``defs`` and are referred to by name."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        found = dict(_type(args[0], defs))
        for meta in args[1:]:
            if isinstance(meta, str):
                found["description"] = meta
            elif isinstance(meta, type) and issubclass(meta, Enum):
                values: list[Any] = [m.value for m in meta]
                if {"type": "null"} in found.get("anyOf", []) or found.get("type") == ["string", "null"]:
                    values.append(None)
                found = {k: v for k, v in found.items() if k not in ("type", "anyOf")} | {"enum": values}
        return found
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if hint is Any:
        return {}
    if origin in (typing.Union, types.UnionType):
        options = [_type(a, defs) for a in args]
        if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
            return {"type": [o["type"] for o in options]}
        return {"anyOf": options}
    if origin is list:
        return {"type": "array", "items": _type(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type(args[1], defs)}
    if _is_typeddict(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # a placeholder while its fields are made (a type may refer to itself)
            hints = typing.get_type_hints(hint, include_extras=True)
            doc = " ".join((hint.__doc__ or "").replace("``", "`").split())
            defs[name] = {
                **({"description": doc} if doc else {}),
                "type": "object",
                "properties": {key: _type(value, defs) for key, value in hints.items()},
                "required": sorted(hint.__required_keys__),
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for the type {hint!r} (report/board.py)")


def schema() -> dict[str, Any]:
    """The schema of ``leaderboard.json`` as this version writes it."""
    defs: dict[str, Any] = {"number": NUMBER}
    root = _type(Board, defs)
    board = defs.pop(root["$ref"].rsplit("/", 1)[1])
    board["properties"]["schema"] = {**board["properties"]["schema"], "const": SCHEMA}
    first = ("schema", "generated_at", "plugin_version")  # in the order the file has them
    board["properties"] = {**{k: board["properties"][k] for k in first}, **board["properties"]}
    return {"$schema": DIALECT, "$id": f"urn:{SCHEMA.replace('/', ':')}", "title": "leaderboard.json",
            **board, "$defs": dict(sorted(defs.items()))}


def dumps() -> str:
    """The schema file's exact text."""
    return json.dumps(schema(), indent=1, ensure_ascii=False) + "\n"


def shipped() -> dict[str, Any]:
    """The schema the installed package carries (``report/leaderboard.schema.json``)."""
    text = resources.files("pytest_cannbench.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    found: dict[str, Any] = json.loads(text)
    return found


# ---------------------------------------------------------------------------------------------------- Markdown


def _kind(node: dict[str, Any]) -> str:
    """A schema node in a few words: ``number or null``, ``array of CaseEntry``, ``object: string → LevelEntry``
    (null named first, so that ``null or array of number`` reads one way)."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return "number" if name == "number" else f"[{name}](#{name.lower()})"
    if "enum" in node:
        return ("null or " if None in node["enum"] else "") + "string"
    if "anyOf" in node or isinstance(node.get("type"), list):
        parts = node.get("anyOf") or [{"type": t} for t in node["type"]]
        kinds = [_kind(p) for p in parts]
        return " or ".join(sorted(kinds, key=lambda k: k != "null"))
    kind = node.get("type")
    if kind == "array":
        return f"array of {_kind(node['items'])}"
    if kind == "object":
        extra = node.get("additionalProperties")
        return f"object: string → {_kind(extra)}" if isinstance(extra, dict) and extra else "object"
    return str(kind or "any")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _rows(node: dict[str, Any]) -> list[str]:
    required = set(node.get("required", []))
    rows = ["| key | type | description |", "|---|---|---|"]
    for key, field in node["properties"].items():
        mark = "" if key in required else " (optional)"
        text = field.get("description", "")
        if "enum" in field and len(field["enum"]) <= 16:
            text = f"{text.rstrip('.')}: one of {', '.join(f'`{v}`' for v in field['enum'] if v is not None)}"
        rows.append(f"| `{key}`{mark} | {_cell(_kind(field))} | {_cell(text)} |")
    return rows


def tables() -> str:
    """The schema as Markdown: the board, then each object type it uses, then the case statuses and failure
    types (each failure type's description and fix hint, outcome.FAILURES)."""
    found = schema()
    out = ["### leaderboard.json", "", " ".join(found.get("description", "").split()), "", *_rows(found)]
    for name, node in found["$defs"].items():
        if name == "number":
            continue
        out += ["", f"### {name}", ""]
        if node.get("description"):
            out += [node["description"], ""]
        out += _rows(node)
    out += ["", "### Statuses", "", ", ".join(f"`{s.value}`" for s in Status), "",
            "### Failure types", "", "| failure_type | status | whose | what happened | what to do |",
            "|---|---|---|---|---|"]
    for ft in FailureType:
        doc = FAILURES[ft]
        out.append(f"| `{ft.value}` | `{doc.status.value}` | {doc.blame.value} | {_cell(doc.summary)} | "
                   f"{_cell(doc.hint)} |")
    return "\n".join(out)
