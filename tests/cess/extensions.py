"""Tests that run twice, with an optional compiled extension's function and with the pure path that runs
without it (``pip install`` builds the extensions only where a C++ compiler is found)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


def with_and_without(module: ModuleType, attribute: str, extension: str, fallback: str,
                     name: str, also: tuple[tuple[ModuleType, str], ...] = ()) -> Callable[..., str]:
    """A fixture named ``name`` whose value is ``"compiled"`` (``module.attribute`` as built; skipped when the
    extension ``draligned.cess.<extension>`` is not) or ``fallback`` (``module.attribute``, and each other
    ``(module, attribute)`` in ``also`` that holds the same extension, set to None, as without the extension):
    each test taking it runs both ways. Define it at a test module's top level."""
    built = pytest.param("compiled", marks=pytest.mark.skipif(
        getattr(module, attribute) is None, reason=f"the optional extension draligned.cess.{extension} is not built"))

    @pytest.fixture(name=name, params=[fallback, built])
    def fixture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
        if request.param == fallback:
            for where, what in ((module, attribute), *also):
                monkeypatch.setattr(where, what, None)
        return str(request.param)

    return fixture
