"""Where the files the code loads are: harness contracts, evaluator prompts and configs, demo cards,
studies, corpora and analysis plans.

They live in the checkout's top-level folders (``harnesses/``, ``factor_cards/``, ...), where users see
and edit them; that is their one source of truth. A wheel ships each folder as ``draligned/data/<folder>``
(the ``package-dir`` mapping in pyproject.toml), so an installed draligned finds them without a checkout;
``tests/test_wheel.py`` fails if the wheel's files and the folders differ. Studies name their cards,
corpora and pools by paths relative to the study file, and the folders keep their relative places in
both layouts, so the bundled studies resolve in either.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]
"""The source checkout's root, where the folders are when draligned runs from a checkout."""


def data_dir(folder: str) -> Path:
    """The directory of one data folder (e.g. ``"harnesses"``): inside the installed package when a
    wheel installed it, else the checkout's top-level folder (a checkout or an editable install).

    A directory path, not only a resource: studies glob their cards and resolve relative paths.
    """
    packaged = files(__name__) / folder
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return _CHECKOUT / folder
