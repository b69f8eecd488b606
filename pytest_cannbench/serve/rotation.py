"""The input secret of a long-lived service, rotated on a schedule.

A pytest session mixes one random secret into every input seed, so no submission can know its inputs in
advance (``report/secret.py``, ``docs/security.md``). A service lives for days: one secret for its whole life
would let a submitter who learnt the inputs (by recording what a kernel was called with) know the next
submitter's. So the service keeps an *epoch*: a fresh 16-byte secret every ``--secret-rotate`` seconds (default
3600). A request takes the current epoch when it is accepted and keeps it to its end (a batch's candidates all
share one: a group is compared on the same inputs); the answer carries the epoch number and its commitment
(``sha256(tag || secret)``), never the secret. An epoch's secret is revealed, when ``--reveal-secrets DIR`` is
given, only once it has been rotated out *and* no request graded under it is still running, as
``DIR/epoch-<n>.hex`` (mode 0600), so ``cannbench secret`` can check an answer's commitment afterwards.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.report.secret import SECRET_BYTES, commitment, reveal


@dataclass
class Epoch:
    number: int
    secret: str = field(repr=False)
    started: float
    users: int = 0
    retired: bool = False

    @property
    def commitment(self) -> str:
        return commitment(self.secret)


class SecretKeeper:
    def __init__(self, rotate_s: float, reveal_dir: str | None = None) -> None:
        self.rotate_s = rotate_s
        self.reveal_dir = Path(reveal_dir) if reveal_dir else None
        self.epochs: dict[int, Epoch] = {}
        self.current = self._new(0)

    def _new(self, number: int) -> Epoch:
        epoch = Epoch(number, os.urandom(SECRET_BYTES).hex(), time.monotonic())
        self.epochs[number] = epoch
        return epoch

    def take(self) -> Epoch:
        """The epoch a new request is graded under (rotating first when it is due); :meth:`release` it after."""
        if self.rotate_s > 0 and time.monotonic() - self.current.started >= self.rotate_s:
            self.rotate()
        self.current.users += 1
        return self.current

    def release(self, epoch: Epoch) -> None:
        epoch.users -= 1
        self._settle(epoch)

    def rotate(self) -> Epoch:
        old = self.current
        old.retired = True
        self.current = self._new(old.number + 1)
        self._settle(old)
        return self.current

    def _settle(self, epoch: Epoch) -> None:
        """A retired epoch nobody grades under any more: revealed (if asked) and forgotten."""
        if not epoch.retired or epoch.users > 0:
            return
        if self.reveal_dir is not None:
            reveal(str(self.reveal_dir / f"epoch-{epoch.number}.hex"), epoch.secret)
        self.epochs.pop(epoch.number, None)

    def close(self) -> None:
        """At shutdown (after the drain): every epoch is retired and settled."""
        for epoch in list(self.epochs.values()):
            epoch.retired = True
            epoch.users = 0
            self._settle(epoch)
