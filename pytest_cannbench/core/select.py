"""Case selection with pytest's ``-k`` grammar, without pytest: ``gelu``, ``"exp and not float16"``,
``"(level1 or level2) and bfloat16"``. A bare word matches a case when it is a substring of one of the case's
names (operator, relative path, item name, dtypes, category, level), case-insensitively, as ``-k`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

Match = Callable[[Iterable[str]], bool]
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


class SelectError(ValueError):
    """A selection expression that does not parse; the message names the position and the fix."""


def compile_selection(expression: str | None) -> Match:
    """A predicate over a case's names; an empty expression selects everything."""
    if not expression or not expression.strip():
        return lambda names: True
    tokens = [m.group(1) for m in _TOKEN.finditer(expression)]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise SelectError(f"selection {expression!r}: ends where a name or '(' was expected")
        pos += 1
        return tokens[pos - 1]

    def any_of() -> Match:
        left = all_of()
        while peek() == "or":
            take()
            right, first = all_of(), left
            left = (lambda a, b: lambda names: a(names) or b(names))(first, right)
        return left

    def all_of() -> Match:
        left = negation()
        while peek() == "and":
            take()
            right, first = negation(), left
            left = (lambda a, b: lambda names: a(names) and b(names))(first, right)
        return left

    def negation() -> Match:
        if peek() == "not":
            take()
            inner = negation()
            return lambda names: not inner(names)
        token = take()
        if token == "(":
            inner = any_of()
            if take() != ")":
                raise SelectError(f"selection {expression!r}: a '(' is not closed")
            return inner
        if token in (")", "and", "or"):
            raise SelectError(f"selection {expression!r}: {token!r} where a name was expected")
        word = token.lower()
        return lambda names: any(word in name.lower() for name in names)

    match = any_of()
    if pos != len(tokens):
        raise SelectError(f"selection {expression!r}: unexpected {tokens[pos]!r} (join words with and/or/not)")
    return match
