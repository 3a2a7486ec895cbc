"""Mirrored orientation: which endpoint is shown as ALPHA (paper Tables 13 and 16).

Read 1 maps ALPHA/BETA to P/Q by a hash of the packet's orientation-free content, so about half
of the packets put P first; read 2 swaps the mapping. The evaluator answers in ALPHA/BETA and
only the program, which keeps the manifest, restores P/Q.
"""

from __future__ import annotations

from typing import Literal

from draligned.evaluator.aggregate import RestoredSide

ReadNo = Literal[1, 2]
ShownSide = Literal["ALPHA_SIDE", "BETA_SIDE", "BOTH", "NEITHER", "UNKNOWN"]


def alpha_is_p(content_sha256: str, read: ReadNo) -> bool:
    """Whether ALPHA shows endpoint P in this read: hash parity for read 1, its swap for read 2."""
    first = int(content_sha256[0], 16) % 2 == 0
    return first if read == 1 else not first


def restore(side: ShownSide, alpha_p: bool) -> RestoredSide:
    """An evaluator's ALPHA/BETA side as P_SIDE/Q_SIDE; BOTH, NEITHER and UNKNOWN stay."""
    if side == "ALPHA_SIDE":
        return "P_SIDE" if alpha_p else "Q_SIDE"
    if side == "BETA_SIDE":
        return "Q_SIDE" if alpha_p else "P_SIDE"
    return side
