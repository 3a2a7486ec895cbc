"""The compiled walk of draligned.cess.line_chunk (``_line_walk.cpp``)."""

def take_lines(text: bytes, start: int, number: int, counted: bool, out: tuple[list, ...], /) -> tuple[int, int, int]:
    """Gather lines from ``start`` into the 13 lists of ``out`` while they have the canonical shape."""
