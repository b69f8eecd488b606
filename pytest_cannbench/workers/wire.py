"""Length-prefixed frames over pipes: how the judge talks to its worker processes.

Two kinds of frame, one per direction of trust:

* :func:`send` / :func:`receive` carry pickles. Only the judge's own data and
  the golden worker's replies travel this way: both sides run trusted code.
* :func:`send_json` / :func:`receive_json` carry JSON. The candidate worker
  runs submission code, so everything it sends is parsed as JSON, never
  unpickled (a crafted pickle runs code in whoever loads it), and a frame
  larger than :data:`MAX_JSON_FRAME` is refused before it is read.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from typing import IO, Any

_HEADER = struct.Struct(">Q")
MAX_JSON_FRAME = 16 << 20  # headers and messages only; tensors travel in shared memory


class PeerClosed(EOFError):
    """The other side closed the pipe (exited or was killed) before a whole frame arrived."""


class BadFrame(ValueError):
    """A frame that is not what the protocol allows (too large, not JSON, not an object)."""


def _send_bytes(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def send(stream: IO[bytes], message: Any) -> None:
    _send_bytes(stream, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _read_exact(fd: int, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, min(size - len(chunks), 1 << 24))
        if not chunk:
            raise PeerClosed(f"pipe closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def receive(fd: int) -> Any:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    return pickle.loads(_read_exact(fd, size))


def send_json(stream: IO[bytes], message: dict[str, Any]) -> None:
    _send_bytes(stream, json.dumps(message, allow_nan=True, default=str).encode())


def receive_json(fd: int) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if size > MAX_JSON_FRAME:
        raise BadFrame(f"frame of {size} bytes announced (the limit is {MAX_JSON_FRAME})")
    try:
        message = json.loads(_read_exact(fd, size))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadFrame(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise BadFrame(f"frame is a JSON {type(message).__name__}, not an object")
    return message
