"""Whether any trajectory id of a file repeats, from 64-bit hashes of the ids sorted once.

A file's 10^6 ids in a set of str took 0.08–0.12 s under the GIL in the thread that gathers the row groups,
while the threads reading them waited for it. A hash per id is computed without the GIL
(``_kernels.id_hashes``; Python's ``hash()`` without the extension, which is the same for equal strings
within a process), and sorting 10^6 of them takes about 5 ms. Equal ids have equal hashes, so a file
whose hashes are all distinct has no repeated id; a repeated hash (a repeated id, or by chance or design two
ids of one hash) only sends the caller to look at the ids themselves.
"""

from __future__ import annotations

import numpy as np

try:
    from draligned.cess import _kernels as compiled_hashes
except ImportError:  # installed without a C++ compiler: Python's hash() of each id
    compiled_hashes = None  # type: ignore[assignment]


def id_hashes(ids: list[str] | list[str | None]) -> np.ndarray:
    """A uint64 hash of each id. NULL ids (None) all hash alike: the search that two of them send the caller to
    passes over them (such rows are refused as invalid anyway)."""
    out = np.empty(len(ids), np.uint64)
    if compiled_hashes is not None:
        compiled_hashes.id_hashes(ids, out)
    else:
        out[:] = np.fromiter(map(hash, ids), np.int64, len(ids)).view(np.uint64)
    return out


def any_repeated(hashes: list[np.ndarray]) -> bool:
    """Whether a hash occurs twice among the arrays (False for none: every id is distinct)."""
    every = np.sort(np.concatenate(hashes)) if hashes else np.zeros(0, np.uint64)
    return bool((every[1:] == every[:-1]).any())
