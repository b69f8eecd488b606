"""The static scan's vocabulary: its rules, one hit, the hits of one file, and the line-rule runner.

Shared by the Python (:mod:`scan_python`) and C/C++ (:mod:`scan_cpp`) scanners; what each rule catches is
listed in docs/security.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

RULES: dict[str, str] = {
    "frame_walk": "reads interpreter frames (sys._getframe, inspect.stack, f_back, f_locals, tracing hooks)",
    "gc_walk": "walks the garbage collector's objects (gc.get_objects/get_referrers/get_referents)",
    "sys_modules": "reads or edits sys.modules, import machinery or builtins",
    "threading": "starts threads, processes or extra streams (work outside the timed region)",
    "ctypes": "loads foreign code (ctypes, cffi, dlopen)",
    "timing_patch": "reassigns timing functions (time.*, torch.cuda.Event, synchronize, profiler, perf_counter)",
    "precision_cast": "casts to a lower precision (fp16, bf16, int8, fp8, TF32, autocast, fast-math)",
    "harness_probe": "names the harness (pytest, cannbench, golden, cases.yaml, sys.argv, profiler/mode probes)",
    "builtin_compute": "calls torch compute the submission should implement (torch.<op>, F.<op>, aten, @)",
    "host_library": "uses a host numerics library or a torch compiler (numpy, scipy, numba, jax, torch.compile)",
    "os_exit": "ends the process or forges a test outcome (os._exit, sys.exit, pytest.exit/skip/xfail)",
    "file_write_outside": "writes or deletes files outside the package (absolute or .. paths, rmtree, remove)",
    "monkeypatch": "assigns attributes of imported modules or classes, or function internals",
    "dynamic_code": "runs code this scan cannot see (exec, eval, compile, __import__, import_module, runpy)",
    "aten_call": "C/C++ calls ATen/torch compute or a vendor math library",
    "cpp_thread": "C/C++ starts threads, processes or streams",
    "cpp_timing": "C/C++ touches clocks or symbol interposition (clock_gettime, gettimeofday, dlsym)",
    "syntax_error": "a Python file that does not parse (scanned with regular expressions instead)",
    "file_too_large": "a source file over the size cap (not scanned)",
    "too_many_files": "the scan stopped at the file-count cap",
    "symlink": "a source file that is a symbolic link (not followed)",
}

SNIPPET_CHARS = 160


@dataclass(frozen=True)
class Hit:
    """One rule matching one line of one file (``line`` 0: the whole file)."""

    rule: str
    path: str
    line: int
    snippet: str


class Collector:
    """Hits of one file, one per (rule, line)."""

    def __init__(self, path: str, lines: list[str]) -> None:
        self.path = path
        self.lines = lines
        self.hits: dict[tuple[str, int], Hit] = {}

    def add(self, rule: str, line: int, snippet: str | None = None) -> None:
        key = (rule, line)
        if key in self.hits:
            return
        if snippet is None:
            snippet = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.hits[key] = Hit(rule, self.path, line, snippet[:SNIPPET_CHARS])


# (rule, pattern, accept): a match counts only if ``accept`` (when given) says so.
Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], bool] | None]


def rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def regex_scan(lines: Iterable[str], rules: tuple[Rule, ...], out: Collector) -> None:
    """Apply line rules (C/C++ sources, and Python files :mod:`ast` cannot parse); one hit per rule and line."""
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        for rule, pattern, accept in rules:
            if (rule, number) in out.hits:
                continue
            for m in pattern.finditer(text):
                if accept is None or accept(m):
                    out.add(rule, number)
                    break
