"""The errors of reading a task tree, shared by the modules that parse it.

:class:`TaskFormatError` means the operator cannot be graded at all (``proto.yaml``, ``cases.yaml`` or
a ``perf_model`` expression is malformed); :class:`CaseFormatError` means one case's fields cannot be
turned into inputs, which fails that case only. Both are ``ValueError``s whose message names the file
or field. Standard library only, so every parser can import this module and none imports another
for its error type.
"""

from __future__ import annotations

from pathlib import Path


class TaskFormatError(ValueError):
    """The operator directory cannot be graded; the message names file and field."""

    def __init__(self, path: Path, where: str, problem: str, fix: str = "") -> None:
        self.path = path
        self.where = where
        self.problem = problem
        self.fix = fix
        message = f"{path}: {where}: {problem}" if where else f"{path}: {problem}"
        super().__init__(message + (f" ({fix})" if fix else ""))


class CaseFormatError(ValueError):
    """A cases.yaml field that cannot be turned into inputs.

    Raised at planning time so a malformed case fails collection with a
    message naming the field and the input, instead of crashing (or silently
    misbehaving, as the official harness does) at run time.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field {field!r}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self):  # keep (field, message) across pickling (xdist workers)
        return (type(self), (self.field, self.message))
