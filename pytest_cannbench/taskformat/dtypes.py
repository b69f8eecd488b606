"""Dtype names as task files spell them, and what the judge knows of each, without importing torch.

Task files use lower-case torch names (``float16``, ``bfloat16``, ``int32``).
Proto files of incubator suites also declare formats torch cannot hold on the
CPU (``hifloat8``, ``int4``); they are known names so a proto declaring them
parses, but a *case* asking for one fails when its inputs are generated.

One table for the whole judge: input planning (:mod:`.inputs`) reads the kind,
element size and value bounds of :data:`DTYPE_INFO`; the precision table
(:mod:`pytest_cannbench.judge.thresholds`) reads :data:`INT_DTYPES` and
:data:`TORCH_ALIASES`.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
FLOAT8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
OTHER_DTYPES = ("bool",)
# declared by bench_lab's MX-quantisation protos too: float4_e2m1, float4_e1m2, float8_e8m0 (no CPU torch dtype by these
# names); a proto declaring them parses, a case asking for one fails when its inputs are generated
DECLARED_ONLY_DTYPES = ("hifloat8", "hifloat32", "int4", "float4_e2m1", "float4_e1m2", "float8_e8m0")

KNOWN_DTYPES = frozenset(FLOAT_DTYPES + FLOAT8_DTYPES + INT_DTYPES + OTHER_DTYPES + DECLARED_ONLY_DTYPES)

# Short spellings seen in precision-threshold overrides and torch aliases (``torch.half``); case dtypes
# accept none of them (see canonical_dtype).
TORCH_ALIASES = {
    "half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32",
    "double": "float64", "fp64": "float64", "int": "int32", "long": "int64", "short": "int16",
    "byte": "uint8", "char": "int8",
}


@dataclass(frozen=True)
class DtypeInfo:
    """What input planning needs of a dtype a case may ask for: its family, size and finite bounds."""

    kind: str  # "float", "int" or "bool"
    itemsize: int  # bytes per element
    max: float | int  # largest finite value (torch.full refuses to fill beyond it)
    min: float | int = 0  # smallest value of an integer dtype (floats: -max)


_INT64_MAX = 2**63 - 1

# The dtypes torch holds on the CPU, in the order messages list them.  Names are torch attribute names.
DTYPE_INFO: dict[str, DtypeInfo] = {
    "float16": DtypeInfo("float", 2, 65504.0),
    "bfloat16": DtypeInfo("float", 2, 3.3895313892515355e38),
    "float32": DtypeInfo("float", 4, 3.4028234663852886e38),
    "float64": DtypeInfo("float", 8, 1.7976931348623157e308),
    "float8_e4m3fn": DtypeInfo("float", 1, 448.0),
    "float8_e5m2": DtypeInfo("float", 1, 57344.0),
    "int8": DtypeInfo("int", 1, 2**7 - 1, -(2**7)),
    "int16": DtypeInfo("int", 2, 2**15 - 1, -(2**15)),
    "int32": DtypeInfo("int", 4, 2**31 - 1, -(2**31)),
    "int64": DtypeInfo("int", 8, _INT64_MAX, -(2**63)),
    "uint8": DtypeInfo("int", 1, 2**8 - 1),
    "uint16": DtypeInfo("int", 2, 2**16 - 1),
    "uint32": DtypeInfo("int", 4, 2**32 - 1),
    "uint64": DtypeInfo("int", 8, 2**64 - 1),
    "bool": DtypeInfo("bool", 1, 1),
}


def canonical_dtype(name: str) -> str | None:
    """The canonical lower-case name for ``name`` (case ignored), or None.

    No aliases (``fp16``, ``half``): case dtypes accept none (as the official loader), and a proto
    must not declare a name its cases cannot use.
    """
    key = name.strip().lower()
    return key if key in KNOWN_DTYPES else None


def is_float_name(name: str) -> bool:
    return name in FLOAT_DTYPES or name in FLOAT8_DTYPES
