"""A built wheel unpacked into the candidate's private site directory, in the judge's process, with pypa's
``installer``: unpacking a zip runs none of the submission's code (no build backend, no hooks), so it needs no
sandbox; ``pip install --target`` did the same in a subprocess that cost every candidate about 0.35 s of a
service request. The archive is untrusted, so its member names and sizes are checked before anything is
written (``installer`` joins a member's path to its scheme directory as given).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path, PurePosixPath

from installer import install as install_wheel_file
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.sources import WheelFile

MAX_FILES = 100_000
MAX_BYTES = 8 << 30  # unpacked; a kernel wheel with its shared objects is far below


class WheelRefused(Exception):
    """The wheel cannot be installed; the message names the member or limit and what to change."""


def check_members(wheel: Path) -> int:
    """Every member stays inside its scheme directory, and the whole fits the limits (an archive bomb does not);
    returns the number of members."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = archive.infolist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelRefused(f"{wheel.name} is not a readable zip archive ({exc}): build.sh must leave a wheel") from None
    if len(members) > MAX_FILES:
        raise WheelRefused(f"{wheel.name} holds {len(members)} files, more than {MAX_FILES}: ship fewer files")
    total = 0
    for member in members:
        name = member.filename
        parts = PurePosixPath(name).parts
        if name.startswith("/") or "\\" in name or ".." in parts or (parts and parts[0].endswith(":")):
            raise WheelRefused(f"{wheel.name}: member {name!r} would be written outside the install directory")
        total += member.file_size
        if total > MAX_BYTES:
            raise WheelRefused(f"{wheel.name} unpacks to more than {MAX_BYTES >> 30} GiB: ship a smaller wheel")
    return len(members)


def install(wheel: Path, site: Path, data: Path) -> int:
    """Unpack ``wheel``: its packages into ``site``, its scripts, headers and data under ``data`` (nothing of
    those is imported). Returns the number of files written; raises :class:`WheelRefused`."""
    count = check_members(wheel)
    site.mkdir(parents=True, exist_ok=True)
    scheme = {"purelib": str(site), "platlib": str(site)}
    scheme.update({kind: str(data / kind) for kind in ("headers", "scripts", "data")})
    destination = SchemeDictionaryDestination(
        scheme, interpreter=sys.executable, script_kind="posix", bytecode_optimization_levels=()
    )
    try:
        with WheelFile.open(wheel) as source:
            install_wheel_file(source, destination, additional_metadata={"INSTALLER": b"pytest-cannbench\n"})
    except (InstallerError, OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise WheelRefused(f"{wheel.name} did not install: {type(exc).__name__}: {exc}") from None
    return count
