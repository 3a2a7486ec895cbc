"""What every benchmark prints about the machine it ran on, with a figure for how fast that machine was.

On this workplace's 2-core machines the same command's figures have moved by a factor of two between days
(``bench_demo.py``: 17 s in one session, 32 s in a later one, both idle), so a figure alone does not say
whether a change or the machine moved it. :func:`reference_s` times one fixed pure-Python workload, of the
kind the harness's own code is (integer and string work, dicts, a JSON dump, a hash), and each benchmark
prints it next to its figures: figures of two days compare after dividing by it. The load averages say
whether other work shared the cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time

REFERENCE_ITEMS = 1_000_000
"""The reference workload's size: 0.40-0.53 CPU-s (best of 3) on this workplace's 2-core machine on 2026-12-02."""


def _workload() -> int:
    """The fixed work :func:`reference_s` times."""
    seen: dict[int, str] = {}
    total = 0
    for i in range(REFERENCE_ITEMS):
        text = f"doc-{i}"
        seen[i & 1023] = text
        total += len(text) + (i * 7) % 13
        if i % 100 == 0:
            total += len(hashlib.sha256(json.dumps({"i": i, "text": text}).encode()).digest())
    return total


def reference_s(reps: int = 3) -> float:
    """Best of ``reps`` CPU seconds (this thread) of the fixed workload: smaller is a faster machine."""
    best = float("inf")
    for _ in range(reps):
        start = time.thread_time()
        _workload()
        best = min(best, time.thread_time() - start)
    return round(best, 3)


def describe() -> dict[str, object]:
    """The machine as each benchmark prints it: cores, processor, Python, load averages (1, 5, 15 min) and
    :func:`reference_s`."""
    return {"cores": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "load_avg": [round(x, 2) for x in os.getloadavg()],
            "reference_s": reference_s()}
