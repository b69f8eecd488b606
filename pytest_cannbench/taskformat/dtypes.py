"""Dtype names as task files spell them, without importing torch.

Task files use lower-case torch names (``float16``, ``bfloat16``, ``int32``).
Proto files of incubator suites also declare formats torch cannot hold on the
CPU (``hifloat8``, ``int4``); they are known names so a proto declaring them
parses, but a *case* asking for one fails when its inputs are generated.
"""

from __future__ import annotations

from typing import Optional

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
FLOAT8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
OTHER_DTYPES = ("bool",)
DECLARED_ONLY_DTYPES = ("hifloat8", "hifloat32", "int4")

KNOWN_DTYPES = frozenset(FLOAT_DTYPES + FLOAT8_DTYPES + INT_DTYPES + OTHER_DTYPES + DECLARED_ONLY_DTYPES)

def canonical_dtype(name: str) -> Optional[str]:
    """The canonical lower-case name for ``name`` (case ignored), or None.

    No aliases (``fp16``, ``half``): case dtypes accept none (as the official loader), and a proto
    must not declare a name its cases cannot use.
    """
    key = name.strip().lower()
    return key if key in KNOWN_DTYPES else None


def is_float_name(name: str) -> bool:
    return name in FLOAT_DTYPES or name in FLOAT8_DTYPES
