"""Generated hidden cases: new shapes derived from an operator's public cases under the session secret.

Pure and deterministic: the same public cases, count and key (the session secret, or ``seed=<N>`` under
``--cann-seed``) give the same cases, so a seeded run reproduces and a secret run cannot be foreseen. The
rules (docs/hidden-cases.md, "Generator rules") only use what the public cases show:

- a case keeps a public *template*'s structure: input count, ranks, TensorList lengths, null inputs, its dtype
  entry, its attrs and its value ranges (templates cycle through every public dtype entry);
- dimensions that are equal in every public case of the same structure stay equal (one *class*); a class with
  one value in several cases stays constant, a class that is 1 in the template stays 1 (broadcast), any other draws
  log-uniformly within the public min..max, as a multiple of the public values' gcd (alignment), a power of two when
  every public value is one; the only case of its structure draws within the operator's dimension range, keeping
  its value's power-of-two factor up to 16;
- a class that is a fixed multiple of another in every public case (3 x hidden) stays that multiple;
- an integer attr (or list-attr element) that equals a class in every public case follows it; one that divides a
  class in every public case (groups) keeps dividing it, one a class never falls below (top-k's k) stays a floor;
- an integer input's upper bound that is class - 1 in every public case follows the class; one that stays below a
  class is clipped below its new value (indices stay in range);
- the total element count stays within the public cases' range, and no generated shape equals a public one.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_TRIES = 200  # draws per case before it is dropped as "no new shape"


@dataclass(frozen=True)
class Generated:
    """One generated case (its raw ``cases.yaml`` mapping), or why no case could be made."""

    raw: dict[str, Any] | None
    dropped: str = ""


@dataclass
class _Group:
    """Public cases with one structure: their dims per slot, equality classes and the class of each slot."""

    cases: list[dict[str, Any]]
    dims: list[list[int]]  # [case][slot]
    slot_class: list[int] = field(default_factory=list)
    class_values: list[list[int]] = field(default_factory=list)  # [class] -> value per case
    multiple_of: dict[int, tuple[int, int]] = field(default_factory=dict)  # class -> (base class, factor)


def _entries(raw: Any) -> list[Any]:
    """input_shape as one entry per input (a bare shape is one input)."""
    if isinstance(raw, list) and raw and raw[0] is not None and not isinstance(raw[0], list):
        return [raw]
    return list(raw) if isinstance(raw, list) else []


def _structure(entries: list[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for entry in entries:
        if entry is None:
            out.append(None)
        elif entry and isinstance(entry[0], list):
            out.append(tuple(len(sub) for sub in entry))
        else:
            out.append(len(entry))
    return tuple(out)


def _flat(entries: list[Any]) -> list[int]:
    dims: list[int] = []
    for entry in entries:
        if entry is None:
            continue
        for sub in entry if entry and isinstance(entry[0], list) else [entry]:
            dims.extend(int(d) for d in sub)
    return dims


def _rebuild(template: list[Any], dims: Sequence[int]) -> list[Any]:
    it = iter(dims)
    out: list[Any] = []
    for entry in template:
        if entry is None:
            out.append(None)
        elif entry and isinstance(entry[0], list):
            out.append([[next(it) for _ in sub] for sub in entry])
        else:
            out.append([next(it) for _ in entry])
    return out


def _numel(entries: list[Any]) -> int:
    total = 0
    for entry in entries:
        if entry is None:
            continue
        for sub in entry if entry and isinstance(entry[0], list) else [entry]:
            total += math.prod(int(d) for d in sub)
    return total


def _classes(group: _Group) -> None:
    """Union slots whose values agree in every case of the group; find classes that are a fixed multiple of
    another (a gate dimension of 3 x hidden, say)."""
    slots = len(group.dims[0])
    columns = [tuple(row[s] for row in group.dims) for s in range(slots)]
    first: dict[tuple[int, ...], int] = {}
    for column in columns:
        if column not in first:
            first[column] = len(group.class_values)
            group.class_values.append(list(column))
        group.slot_class.append(first[column])
    for a, top in enumerate(group.class_values):
        for b, base in enumerate(group.class_values):
            if a == b or b in group.multiple_of or min(base) < 2 or len(set(top)) < 2:
                continue
            ratios = {t // d for t, d in zip(top, base) if t % d == 0}
            if len(ratios) == 1 and all(t % d == 0 for t, d in zip(top, base)) and min(ratios) >= 2:
                group.multiple_of[a] = (b, ratios.pop())
                break


def _int_attr_slots(attrs: Any) -> list[tuple[str, int | None, int]]:
    """(name, index in a list attr or None, value) of every integer attr value (bools excluded)."""
    out: list[tuple[str, int | None, int]] = []
    for name, value in (attrs or {}).items() if isinstance(attrs, dict) else ():
        if isinstance(value, int) and not isinstance(value, bool):
            out.append((name, None, value))
        elif isinstance(value, list):
            out += [(name, i, v) for i, v in enumerate(value) if isinstance(v, int) and not isinstance(v, bool)]
    return out


def _attr_value(attrs: Any, name: str, index: int | None) -> Any:
    value = attrs.get(name) if isinstance(attrs, dict) else None
    if index is None:
        return value
    return value[index] if isinstance(value, list) and index < len(value) else None


def _tied_class(group: _Group, values: list[Any], offset: int) -> int | None:
    """The class equal to ``value - offset`` in every case that has one (at least two, and not 1)."""
    known = [(c, v) for c, v in enumerate(values) if isinstance(v, int) and not isinstance(v, bool)]
    if len(known) < 2 or len({v for _, v in known}) < 2:
        return None
    for k, column in enumerate(group.class_values):
        if all(column[c] == v + offset for c, v in known) and min(column) > 1:
            return k
    return None


def _draw(values: list[int], template_value: int, rng: random.Random, *, step: int = 1, floor: int = 0,
          alone: tuple[int, int] | None = None) -> int:
    """One class's new value; ``step`` and ``floor`` come from the template's attrs (divisors, bounds); ``alone``
    is the operator's dimension range, used when the template is the only public case of its structure."""
    distinct = sorted(set(values))
    if template_value == 1 or (len(distinct) == 1 and alone is None):
        return template_value
    if alone is not None:  # one case shows no range: the operator's dims do, keeping the value's alignment
        distinct = [alone[0], alone[1]]
        align = math.lcm(min(16, template_value & -template_value), step)
    else:
        align = math.lcm(math.gcd(*distinct) or 1, step)
    lo, hi = max(distinct[0], floor), distinct[-1]
    if alone is None and all(v > 0 and v & (v - 1) == 0 for v in distinct) and step & (step - 1) == 0:
        return 1 << rng.randint(min((lo - 1).bit_length(), hi.bit_length() - 1), hi.bit_length() - 1)
    lo = min(lo, hi)
    value = round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(max(hi, 1)))) / align) * align
    return max(int(value), -(-lo // align) * align)


def _attr_constraints(group: _Group, template: dict[str, Any]) -> tuple[dict[int, int], dict[int, int]]:
    """Per class, the step (an int attr that divides it in every public case) and the floor (an int attr it
    never falls below: top-k's k) that the template's attrs put on it."""
    step: dict[int, int] = {}
    floor: dict[int, int] = {}
    for name, index, value in _int_attr_slots(template.get("attrs")):
        if value < 2:
            continue
        seen = [(c, v) for c, v in enumerate(_attr_value(c.get("attrs"), name, index) for c in group.cases)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        for k, column in enumerate(group.class_values):
            if len(set(column)) < 2:
                continue
            if all(column[c] % v == 0 for c, v in seen):
                step[k] = math.lcm(step.get(k, 1), value)
            if all(column[c] >= v for c, v in seen):
                floor[k] = max(floor.get(k, 0), value)
    return step, floor


def _index_bound(group: _Group, his: list[Any]) -> int | None:
    """The class an integer input's upper bound stays below in every public case (the tightest one)."""
    known = [(c, v) for c, v in enumerate(his) if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if not known:
        return None
    fits = [(sum(column[c] - 1 - v for c, v in known), k) for k, column in enumerate(group.class_values)
            if len(set(column)) > 1 and all(column[c] - 1 >= v for c, v in known)]
    return min(fits)[1] if fits else None


def _range_hi(case: dict[str, Any], i: int) -> Any:
    vr = case.get("value_range")
    if isinstance(vr, list) and vr and isinstance(vr[0], list) and i < len(vr):
        pair = vr[i]
        if isinstance(pair, list) and len(pair) == 2 and not isinstance(pair[0], list):
            return pair[1]
    return None


def stream(key: str, rel_path: str) -> random.Random:
    """The generator's random stream for one operator: a function of the key and the operator only."""
    digest = hashlib.sha256(f"cannbench-hidden/{key}/{rel_path}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def generate(public: Sequence[dict[str, Any]], count: int, *, key: str, rel_path: str,
             first_id: int) -> list[Generated]:
    """``count`` hidden cases from the valid public cases' raw mappings, ids from ``first_id`` on."""
    cases = [dict(c) for c in public if isinstance(c, dict)]
    if count <= 0:
        return []
    if not cases:
        return [Generated(None, "no valid public case to derive from")] * count
    rng = stream(key, rel_path)
    groups: dict[tuple[Any, ...], _Group] = {}
    for case in cases:
        entries = _entries(case.get("input_shape"))
        group = groups.setdefault(_structure(entries), _Group([], []))
        group.cases.append(case)
        group.dims.append(_flat(entries))
    for group in groups.values():
        _classes(group)
    sizes = [_numel(_entries(c.get("input_shape"))) for c in cases]
    low, high = min(sizes), max(sizes)
    dims = [d for g in groups.values() for row in g.dims for d in row if d > 1]
    dim_range = (min(dims, default=2), max(dims, default=2))
    public_shapes = {json.dumps(_entries(c.get("input_shape"))) for c in cases}
    by_dtype: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        by_dtype.setdefault(json.dumps(case.get("dtype"), sort_keys=True), []).append(case)
    dtypes = sorted(by_dtype)
    rng.shuffle(dtypes)
    made: set[str] = set()
    out: list[Generated] = []
    for i in range(count):
        template = rng.choice(by_dtype[dtypes[i % len(dtypes)]])
        entries = _entries(template.get("input_shape"))
        group = groups[_structure(entries)]
        raw = _one(template, entries, group, rng, low, high, public_shapes, made, dim_range)
        if raw is None:
            out.append(Generated(None, "no new shape within the constraints the public cases show"))
            continue
        raw["case_id"] = first_id + i
        out.append(Generated(raw))
    return out


def _one(template: dict[str, Any], entries: list[Any], group: _Group, rng: random.Random, low: int, high: int,
         public_shapes: set[str], made: set[str], dim_range: tuple[int, int]) -> dict[str, Any] | None:
    row = group.cases.index(template)
    template_dims = group.dims[row]
    attr_ties = [(name, index, _tied_class(group, [_attr_value(c.get("attrs"), name, index) for c in group.cases], 0))
                 for name, index, _ in _int_attr_slots(template.get("attrs"))]
    his = [[_range_hi(c, i) for c in group.cases] for i in range(len(entries))]
    range_ties = [(i, _tied_class(group, his[i], 1), _index_bound(group, his[i])) for i in range(len(entries))]
    step, floor = _attr_constraints(group, template)
    fallback: tuple[list[Any], list[int]] | None = None
    for attempt in range(MAX_TRIES):
        values = [_draw(column, column[row], rng, step=step.get(k, 1), floor=floor.get(k, 0),
                        alone=dim_range if len(group.cases) == 1 else None)
                  for k, column in enumerate(group.class_values)]
        for k, (base, factor) in group.multiple_of.items():
            values[k] = values[base] * factor
        dims = [values[group.slot_class[s]] for s in range(len(template_dims))]
        shape = _rebuild(entries, dims)
        text = json.dumps(shape)
        if text in public_shapes or not low <= _numel(shape) <= high:
            continue
        if text in made and attempt < MAX_TRIES // 2:
            fallback = fallback or (shape, values)
            continue
        made.add(text)
        return _case(template, shape, values, attr_ties, range_ties)
    if fallback is None:
        return None
    return _case(template, fallback[0], fallback[1], attr_ties, range_ties)


def _case(template: dict[str, Any], shape: list[Any], values: list[int],
          attr_ties: list[tuple[str, int | None, int | None]],
          range_ties: list[tuple[int, int | None, int | None]]) -> dict[str, Any]:
    raw: dict[str, Any] = {"operator": template.get("operator"), "case_id": None, "input_shape": shape,
                           "dtype": template.get("dtype")}
    attrs = json.loads(json.dumps(template.get("attrs") or {}))
    for name, index, k in attr_ties:
        if k is None:
            continue
        if index is None:
            attrs[name] = values[k]
        else:
            attrs[name][index] = values[k]
    raw["attrs"] = attrs
    if "value_range" in template:
        raw["value_range"] = json.loads(json.dumps(template["value_range"]))
        for i, tied, bound in range_ties:
            pair = raw["value_range"][i] if i < len(raw["value_range"]) else None
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int)):
                continue
            if tied is not None:
                pair[1] = values[tied] - 1
            elif bound is not None:
                pair[1] = min(pair[1], values[bound] - 1)
            if isinstance(pair[0], int) and pair[0] > pair[1]:
                pair[0] = pair[1]
    if raw["operator"] is None:
        del raw["operator"]
    return raw
