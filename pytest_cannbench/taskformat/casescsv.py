"""Agreement of ``cases.csv`` (a derived export) with ``cases.yaml``.

The harness never reads the CSV, but people and tools do; the official repo
keeps them equal with a unit test. We check the same thing at collection and
report every disagreement as a warning naming the case and the column.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

COLUMNS = ["operator", "case_id", "input_shape", "dtype", "attrs", "value_range", "note"]
_JSON_COLUMNS = ("input_shape", "dtype", "attrs", "value_range")


def _normal(value: Any) -> Any:
    """Both sides in one vocabulary: special floats as strings, numeric strings as floats."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("nan", ".nan"):
            return "nan"
        if text.lower() in ("inf", ".inf", "+inf", "infinity"):
            return "inf"
        if text.lower() in ("-inf", "-.inf", "-infinity"):
            return "-inf"
        try:
            return float(text)
        except ValueError:
            return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    return value


def _decode(text: str) -> Any:
    """A list/dict column: JSON, or a Python literal (bench_lab's exports write ``['float16']`` and
    ``{'pooled_h': 7}``); empty is None. Raises ValueError when it is neither."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    import ast

    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        raise ValueError(str(exc)) from None


def compare_csv(csv_path: Path, yaml_cases: list[dict[str, Any]]) -> list[str]:
    """Disagreements between ``csv_path`` and the parsed YAML cases, one message each."""
    problems: list[str] = []
    try:
        with csv_path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return [f"{csv_path}: cannot read ({exc})"]
    if sorted(header) != sorted(COLUMNS):  # any order: bench_lab's exports put case_id first
        return [f"{csv_path}: header is {header}, expected the columns {COLUMNS}"]
    by_id: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_id[str(row["case_id"]).strip()] = row
    yaml_ids = [str(c.get("case_id")) for c in yaml_cases if isinstance(c, dict)]
    missing = [i for i in yaml_ids if i not in by_id]
    extra = [i for i in by_id if i not in yaml_ids]
    if missing:
        problems.append(f"{csv_path}: case_id {', '.join(missing)} in cases.yaml but not in cases.csv")
    if extra:
        problems.append(f"{csv_path}: case_id {', '.join(extra)} in cases.csv but not in cases.yaml")
    for case in yaml_cases:
        if not isinstance(case, dict) or str(case.get("case_id")) not in by_id:
            continue
        row = by_id[str(case.get("case_id"))]
        for column in COLUMNS[:-1]:
            text = row[column]
            if column in _JSON_COLUMNS:
                try:
                    csv_value = _decode(text)
                except ValueError:
                    problems.append(f"{csv_path}: case_id {case.get('case_id')}: column {column!r} is neither "
                                    "JSON nor a Python literal")
                    continue
            else:
                csv_value = text
            if _normal(csv_value) != _normal(case.get(column)):
                problems.append(f"{csv_path}: case_id {case.get('case_id')}: column {column!r} is {text!r} "
                                f"but cases.yaml has {case.get(column)!r}")
        if (row["note"] or "").strip() != str(case.get("note") or "").strip():
            problems.append(f"{csv_path}: case_id {case.get('case_id')}: column 'note' differs from cases.yaml")
    return problems
