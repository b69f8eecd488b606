"""The first process of a shard's pytest session on its node: bound to its judge, then replaced by pytest.

``python -m pytest_cannbench.cluster.launch_main PARENT_PID CORES -- python -m pytest ...``. Before it execs the
command it asks the kernel to kill it when its parent (the Ray worker running the shard) dies, so a node taken
down or a worker killed by Ray leaves no session grading on, orphaned (the session's own golden and candidate
workers already die with it); and, for a CPU judge, it pins itself to the judge's cores (``CORES``, comma
separated; ``-`` for none), which the plugin reads as the CPUs its session may use. Both survive ``exec``. Done
here rather than in ``preexec_fn``, which is unsafe in a multithreaded parent such as a Ray worker.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: launch_main PARENT_PID CORES -- COMMAND...", file=sys.stderr)
        return 2
    parent, cores, command = int(argv[0]), argv[1], argv[3:]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the line above took effect
        return 1
    if cores != "-" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    os.execv(command[0], command)
    return 1  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
