"""The session secret after the run: a commitment in every artefact, the secret itself only where the user asks.

Grading a submission without ``--cann-seed`` mixes a per-session secret into every input seed and keys the hidden
cases' generator with it (``taskformat/hidden_gen.py``, public code). Whoever holds the secret can regenerate the
run's inputs and hidden cases, so no report holds it: the leaderboard's ``config.secret_commitment`` (and every
``results.jsonl`` line's ``secret``) is ``sha256(SECRET_COMMITMENT_TAG || secret bytes)``, which binds the board
to its secret without revealing it (16 random bytes: nothing to guess). ``--cann-reveal-secret PATH`` writes the
secret, as hex, to a file of the user's choosing with mode 0600, once the session's workers have stopped (no
submission code runs any more); :func:`verify` checks a revealed secret against a board (``cannbench secret``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

SECRET_COMMITMENT_TAG = b"pytest-cannbench/session-secret/v1\0"
SECRET_BYTES = 16


def commitment(secret: str) -> str:
    """The commitment of a hex secret ("" without one)."""
    if not secret:
        return ""
    return hashlib.sha256(SECRET_COMMITMENT_TAG + bytes.fromhex(secret)).hexdigest()


def reveal(path: str, secret: str) -> None:
    """Write ``secret`` (hex and a newline) to ``path``, created 0600 beside it and renamed over it: an existing
    file or symlink there is replaced, never written through, and no other user can read it at any moment."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secret + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def read_revealed(path: str) -> str:
    """The hex secret of a revealed file; raises ValueError when the file holds none."""
    text = Path(path).read_text(encoding="ascii", errors="replace").strip()
    try:
        if len(bytes.fromhex(text)) != SECRET_BYTES:
            raise ValueError
    except ValueError:
        raise ValueError(f"{path}: not a session secret ({SECRET_BYTES} bytes as hex)") from None
    return text.lower()


def commitments_of(board: dict[str, Any]) -> list[str]:
    """The commitments a board records: its own (``config.secret_commitment``) and, for a merged board, those of
    its inputs (``merged_from[].secret_commitments``), each once, in order."""
    found = [(board.get("config") or {}).get("secret_commitment")]
    for entry in board.get("merged_from") or []:
        listed = entry.get("secret_commitments") if isinstance(entry, dict) else None
        found += listed if isinstance(listed, list) else []
    return list(dict.fromkeys(c for c in found if isinstance(c, str) and c))


def verify(board: dict[str, Any], secret: str) -> bool:
    """Whether ``secret`` is the one a board (or one of a merged board's inputs) was graded under."""
    return commitment(secret) in commitments_of(board)
