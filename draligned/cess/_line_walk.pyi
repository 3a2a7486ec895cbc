"""The compiled walk of draligned.cess.line_chunk (``_line_walk.cpp``)."""

def take_lines(text: bytes, start: int, number: int, out: tuple[list, ...], /) -> tuple[int, int, tuple[bytes, ...]]:
    """Gather lines from ``start`` while they have the canonical shape: their line numbers, ids and task ids
    into the 3 lists of ``out``, their numbers as one buffer per field (the start, the lines taken, the buffers)."""
