"""CPU seconds of a command and of every process it started, orphans included (Linux).

Run: ``python benchmarks/cpu_all.py CMD ARG...``; prints one JSON line: wall seconds, user and system CPU
seconds. ``/usr/bin/time`` counts only the children the command waited for: a fork server (the ``--workers``
processes' parent) or a resource tracker outlives its parent and is never counted. Here this process is a
child subreaper (``PR_SET_CHILD_SUBREAPER``): such orphans become its children, and it waits for all of them,
so their CPU, and that of the processes they waited for, is in the figure.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces): field 14 of stat(5) is [11]."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def live_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a live process, from its clock ticks."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    t0 = time.perf_counter()
    code = subprocess.call(sys.argv[1:])
    while True:  # the orphans it left (a fork server exits once its parent has)
        try:
            os.wait()
        except ChildProcessError:
            break
    wall = time.perf_counter() - t0
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"command": " ".join(sys.argv[1:]), "exit": code, "wall_s": round(wall, 2),
                      "user_s": round(used.ru_utime, 2), "sys_s": round(used.ru_stime, 2),
                      "cpu_s": round(used.ru_utime + used.ru_stime, 2)}), file=sys.stderr)


if __name__ == "__main__":
    main()
