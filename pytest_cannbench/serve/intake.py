"""What a request may hand in, checked before anything is queued: a submission is untrusted input.

Three shapes (``schema.Submission``), exactly one per request:

- ``files``: relative path -> UTF-8 text. Every name is a relative POSIX path of plain segments (no ``..``, no
  absolute path, no backslash, no NUL or control character, no empty or ``.`` segment), at most
  :attr:`Limits.max_files` of them, each at most :attr:`Limits.max_file_bytes` and together at most
  :attr:`Limits.max_total_bytes` once encoded; text that cannot be encoded as UTF-8 (a lone surrogate) is refused.
- ``archive``: a tar or tar.gz (base64). Read member by member without trusting its headers: regular files and
  directories only (no links, devices or FIFOs), the same name rules, and the same count and size limits counted
  on the bytes actually decompressed, so a decompression bomb stops at the limit instead of filling the disk.
- ``path``: a directory under the ``--submissions-root`` the server was started with; resolved (symlinks
  followed) and refused unless it stays inside the root.

Nothing here writes: :func:`materialize` writes a checked payload into a fresh private directory on the judge's
own node.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import os
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

_SEGMENT = re.compile(r"[^\x00-\x1f\x7f/\\]+")


class BadRequest(Exception):
    """A request refused before it is queued: ``field`` is where (dotted), the message says why and the fix."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.status = field, message, status


@dataclass(frozen=True)
class Limits:
    max_files: int = 512
    max_file_bytes: int = 4 * 2**20
    max_total_bytes: int = 16 * 2**20
    max_path_chars: int = 255
    max_depth: int = 16


@dataclass(frozen=True)
class Payload:
    """A checked submission: its files (path -> bytes), or a directory on the server."""

    files: dict[str, bytes] | None = None
    path: str | None = None

    def size(self) -> int:
        return sum(len(b) for b in (self.files or {}).values())


def check_name(field: str, name: str, limits: Limits) -> str:
    """A file name of a submission, normalised (``a/b.cpp``), or :class:`BadRequest` naming it."""
    where = f"{field}[{name[:80]!r}]"
    if not name:
        raise BadRequest(where, "an empty file name")
    if len(name) > limits.max_path_chars:
        raise BadRequest(where, f"a file name of {len(name)} characters; at most {limits.max_path_chars}")
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise BadRequest(where, "an absolute path; name files relative to the submission's root (csrc/ops.cpp)")
    parts = name.split("/")
    for part in parts:
        if part == "..":
            raise BadRequest(where, "'..' leaves the submission's directory; name files relative to its root")
        if part in ("", "."):
            raise BadRequest(where, "an empty or '.' path segment; write the plain relative path (csrc/ops.cpp)")
        if not _SEGMENT.fullmatch(part):
            raise BadRequest(where, "a backslash, NUL or control character in a file name")
    if len(parts) > limits.max_depth:
        raise BadRequest(where, f"{len(parts)} directory levels; at most {limits.max_depth}")
    return str(PurePosixPath(*parts))


def _add(files: dict[str, bytes], field: str, name: str, data: bytes, limits: Limits) -> None:
    name = check_name(field, name, limits)
    if name in files:
        raise BadRequest(f"{field}[{name!r}]", "named twice")
    prefixes = {str(p) for p in PurePosixPath(name).parents if str(p) != "."}
    clash = next((p for p in prefixes if p in files), None) or next(
        (other for other in files if other.startswith(name + "/")), None
    )
    if clash is not None:
        raise BadRequest(f"{field}[{name!r}]", f"is both a file and a directory (beside {clash!r})")
    if len(files) >= limits.max_files:
        raise BadRequest(field, f"more than {limits.max_files} files")
    if len(data) > limits.max_file_bytes:
        raise BadRequest(f"{field}[{name!r}]", f"{len(data)} bytes; one file may have at most {limits.max_file_bytes}")
    if sum(len(b) for b in files.values()) + len(data) > limits.max_total_bytes:
        raise BadRequest(field, f"more than {limits.max_total_bytes} bytes in all")
    files[name] = data


def from_files(files: dict[str, str], limits: Limits, field: str = "submission.files") -> Payload:
    if not files:
        raise BadRequest(field, "no files: send the submission's build.sh (or setup.py) and its sources")
    out: dict[str, bytes] = {}
    for name, text in files.items():
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(
                f"{field}[{name[:80]!r}]",
                f"not UTF-8 text ({exc.reason} at character {exc.start}); send binary files in an archive",
            ) from None
        _add(out, field, name, data, limits)
    return Payload(files=out)


def from_archive(data_b64: str, kind: str, limits: Limits, field: str = "submission.archive") -> Payload:
    try:
        raw = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{field}.data", "not base64") from None
    stream: Any = io.BytesIO(raw)
    if kind == "tar.gz":
        stream = gzip.GzipFile(fileobj=stream)
    out: dict[str, bytes] = {}
    budget = limits.max_total_bytes
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # a stream: members in order, nothing seeks
            for member in tar:
                if member.isdir():
                    check_name(field, member.name.rstrip("/"), limits)
                    continue
                if not member.isreg():
                    raise BadRequest(
                        f"{field}[{member.name[:80]!r}]", "not a regular file (links, devices and FIFOs are refused)"
                    )
                handle = tar.extractfile(member)
                assert handle is not None
                cap = min(limits.max_file_bytes, budget) + 1
                content = handle.read(cap)  # read what is really there, never more than the limit and one byte
                if len(content) >= cap:
                    raise BadRequest(
                        field,
                        f"{member.name[:80]!r} decompresses past the limits "
                        f"({limits.max_file_bytes} bytes a file, {limits.max_total_bytes} in "
                        "all): an archive bomb?",
                    )
                budget -= len(content)
                _add(out, field, member.name.removeprefix("./"), content, limits)
    except BadRequest:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BadRequest(f"{field}.data", f"not a readable {kind} archive: {exc}") from None
    if not out:
        raise BadRequest(field, "an archive with no files")
    return Payload(files=out)


def from_path(path: str, root: str | None, field: str = "submission.path") -> Payload:
    if not root:
        raise BadRequest(
            field,
            "this server grades no directory of its own: it was started without "
            "--submissions-root; send the files inline or as an archive",
            status=403,
        )
    if "\0" in path or not path:
        raise BadRequest(field, "an empty path or a NUL character")
    base = Path(root).resolve()
    target = (base / path).resolve()
    if target != base and base not in target.parents:
        raise BadRequest(field, f"{path!r} leaves the submissions root; name a directory inside it", status=403)
    if not target.is_dir():
        raise BadRequest(field, f"{path!r}: no such directory under the submissions root")
    return Payload(path=str(target))


def payload_of(submission: Any, limits: Limits, root: str | None, field: str = "submission") -> Payload:
    """The checked payload of a ``schema.Submission``."""
    given = [k for k in ("files", "archive", "path") if getattr(submission, k) is not None]
    if len(given) != 1:
        raise BadRequest(
            field, "give exactly one of files, archive or path" + (f" (got {', '.join(given)})" if given else "")
        )
    if submission.files is not None:
        return from_files(submission.files, limits, f"{field}.files")
    if submission.archive is not None:
        return from_archive(submission.archive.data, submission.archive.format, limits, f"{field}.archive")
    return from_path(submission.path, root, f"{field}.path")


def materialize(payload: Payload, directory: Path) -> Path:
    """Write a payload's files into ``directory`` (private, made by the caller); a server path is returned as is.
    ``build.sh`` keeps an executable bit, as a checkout would give it."""
    if payload.files is None:
        assert payload.path is not None
        return Path(payload.path)
    for name, data in payload.files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(
            target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700 if name.endswith(".sh") else 0o600
        )
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return directory
