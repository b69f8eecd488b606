"""One junit-xml file from the shards' files, as one local session would have written it.

Every shard's session writes ``--junitxml`` (one ``<testcase>`` per case, with the plugin's ``cann_*``
properties). They are joined into one ``<testsuite>``: the test cases in the order of their classes (an
operator's cases keep their session's order), the counts recomputed from the cases, the suite's properties
recomputed from the merged board (:func:`report.splits.junit_properties`). A case of a shard that produced no
verdict appears as an ``<error>`` carrying ``cann_status=interrupted``, so a CI widget shows it red rather than
not at all.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_cannbench.atomic import write_bytes_atomic
from pytest_cannbench.report.splits import junit_properties


def _properties(case: ET.Element) -> dict[str, str]:
    props = case.find("properties")
    return {} if props is None else {str(p.get("name")): str(p.get("value")) for p in props.findall("property")}


def _cases(path: Path) -> tuple[list[ET.Element], ET.Element | None]:
    """A shard's test cases and its suite element (None for a file that is absent or not junit)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return [], None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return [], None
    return suite.findall("testcase"), suite


def _class_prefix(cases: list[ET.Element]) -> str:
    """What the sessions put before an operator's dotted path in ``classname`` (the tree's path under the
    rootdir, e.g. ``tasks.``), read from any shard's case."""
    for case in cases:
        key, classname = _properties(case).get("cann_case", ""), case.get("classname", "")
        rel_path = key.rpartition("_")[0]
        tail = rel_path.replace("/", ".") + ".cases.yaml"
        if rel_path and classname.endswith(tail):
            return classname[: -len(tail)]
    return ""


def _lost_case(prefix: str, outcome: Mapping[str, Any]) -> ET.Element:
    rel_path, key = str(outcome["rel_path"]), str(outcome["key"])
    label = key[len(rel_path) + 1 :] if key.startswith(rel_path + "_") else key
    label = label.zfill(2) if label.isdigit() else label  # as collection names a case: case ids of two digits
    case = ET.Element(
        "testcase",
        classname=prefix + rel_path.replace("/", ".") + ".cases.yaml",
        name=f"{rel_path.rsplit('/', 1)[-1]}[{label}]",
        time="0.000",
    )
    props = ET.SubElement(case, "properties")
    for name, value in (
        ("cann_case", key),
        ("cann_status", outcome["status"]),
        ("cann_failure_type", outcome["failure_type"]),
    ):
        ET.SubElement(props, "property", name=name, value=str(value))
    error = ET.SubElement(case, "error", message=str(outcome["message"])[:500])
    error.text = str(outcome["message"])
    return case


def merge_junit(
    shard_files: list[Path], lost: Sequence[Mapping[str, Any]], board: Mapping[str, Any], out: Path, wall_s: float
) -> None:
    """Write ``out``: the shards' cases and the lost ones in one suite."""
    cases: list[ET.Element] = []
    first: ET.Element | None = None
    for path in shard_files:
        found, suite = _cases(path)
        cases += found
        first = first if first is not None else suite
    prefix = _class_prefix(cases)
    cases += [_lost_case(prefix, o) for o in lost]
    cases.sort(key=lambda c: c.get("classname", ""))  # stable: an operator's cases keep their order
    counts = {"errors": 0, "failures": 0, "skipped": 0}
    for case in cases:
        if case.find("error") is not None:
            counts["errors"] += 1
        elif case.find("failure") is not None:
            counts["failures"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
    root = ET.Element("testsuites", name="pytest tests")
    suite = ET.SubElement(
        root,
        "testsuite",
        name="pytest",
        errors=str(counts["errors"]),
        failures=str(counts["failures"]),
        skipped=str(counts["skipped"]),
        tests=str(len(cases)),
        time=f"{wall_s:.3f}",
        timestamp=(first.get("timestamp", "") if first is not None else ""),
        hostname="cannbench-cluster",
    )
    props = ET.SubElement(suite, "properties")
    for name, value in junit_properties(board):
        ET.SubElement(props, "property", name=name, value=str(value))
    suite.extend(cases)
    write_bytes_atomic(out, ET.tostring(root, encoding="utf-8", xml_declaration=True))
