"""Length-prefixed pickle frames over pipes: how the judge talks to its worker processes.

Pickle is fine here because the only peer is the golden worker, which runs
trusted task code; untrusted submissions never write to a pipe the judge
unpickles from.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any, BinaryIO

_HEADER = struct.Struct(">Q")


class PeerClosed(EOFError):
    """The other side closed the pipe (exited or was killed) before a whole frame arrived."""


def send(stream: BinaryIO, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


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
