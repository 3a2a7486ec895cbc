"""Process memory settings for loading 10^6 trajectories: reuse freed memory instead of fresh pages.

The Parquet reader makes temporaries of tens of MB per row group (and the JSON Lines workers a 16 MB
range's text and its temporaries). glibc maps each such block
afresh and unmaps it when freed, and numpy asks for transparent huge pages for arrays of 4 MB and
more; on a virtual machine the first touch of fresh memory is slow (free pages go back to the host),
so the Parquet load of 10^6 trajectories spent almost as much system time as user time. Measured there
(benchmarks/README.md): system time 4.2 → 2.1 s, the load 9.6 → 6.5 CPU s. pyarrow's own allocator
(mimalloc) gives freed pages back 10 ms after they are freed, and the decoded row groups come and go
faster than that: :func:`keep_freed_memory` turns that off too when pyarrow is not loaded yet (10^6
trajectories to --json: about 80,000 page faults fewer of 300,000).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from numpy._core import multiarray

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc ``mallopt`` parameters (malloc.h)."""
MMAP_THRESHOLD = 32 << 20
"""Blocks below this come from the heap (glibc's maximum on 64-bit)."""
TRIM_THRESHOLD = 1 << 31
"""Free memory at the heap's top kept for reuse, not returned to the system."""
MIMALLOC_KEEP = {"MIMALLOC_PURGE_DELAY": "-1"}
"""mimalloc's options (read from the environment when pyarrow loads it): never give freed pages back."""


def keep_freed_memory() -> None:
    """Set the process's allocator to reuse freed memory (a no-op where glibc is not the C library), and
    pyarrow's if it is not loaded yet (call this before importing it)."""
    for option, value in MIMALLOC_KEEP.items():
        os.environ.setdefault(option, value)
    multiarray._set_madvise_hugepage(False)  # type: ignore[attr-defined]  # numpy's own (private) switch
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
