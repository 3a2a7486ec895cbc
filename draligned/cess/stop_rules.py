"""The searcher's stop-recommendation rules (paper appendix F), apart from :mod:`draligned.cess.searches` so
that the CLI can offer them as options without importing pydantic and the trajectory models (a third of
`cess estimate`'s start-up)."""

from __future__ import annotations

from typing import Literal, get_args

StopRule = Literal["one_sided", "both_sides"]
"""``one_sided``: the evidence read looks one-sided; ``both_sides``: both sides have been read."""
STOP_RULES: tuple[StopRule, ...] = get_args(StopRule)
"""Stop-recommendation rules, in the order the calibration tries them (the controller turns either into
0.75 / 0.10)."""
