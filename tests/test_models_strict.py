"""Every pydantic model of draligned has one strict base (records.Record) and a docstring on every field."""

from __future__ import annotations

import functools
import importlib
import pkgutil

import pytest
from pydantic import BaseModel, ValidationError

import draligned
from draligned.records import Record

#: One xdist worker runs these, so only one imports every module.
pytestmark = pytest.mark.xdist_group("models_strict")


@functools.cache
def _models() -> list[type[BaseModel]]:
    """Every BaseModel subclass defined in a draligned module (the CLI entry module is not imported).

    Found when a test asks, not at collection: importing every module (the provider SDKs among them) costs
    seconds, which every xdist worker would pay to collect, and only the one running these tests needs."""
    for info in pkgutil.walk_packages(draligned.__path__, "draligned."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    seen: set[type[BaseModel]] = set()
    todo = [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    ours = (m for m in seen if m.__module__.startswith("draligned."))
    return sorted(ours, key=lambda m: (m.__qualname__, m.__module__))


def _problems(model: type[BaseModel]) -> list[str]:
    """What keeps ``model`` from being strict and documented: not a Record, extra fields allowed, fields
    without a docstring."""
    name = f"{model.__module__}.{model.__qualname__}"
    found = []
    if not issubclass(model, Record):
        found.append(f"{name} does not derive from records.Record")
    if model.model_config.get("extra") != "forbid":
        found.append(f"{name}: extra is {model.model_config.get('extra')!r}, not 'forbid'")
    undocumented = [field for field, info in model.model_fields.items() if not info.description]
    if undocumented:
        found.append(f"{name}: fields without a docstring: {undocumented}")
    return found


def test_there_are_models_to_check():
    models = _models()
    assert len(models) > 100 and Record in models


def test_every_model_is_strict_and_documents_every_field():
    assert [problem for model in _models() for problem in _problems(model)] == []


def test_the_check_names_a_loose_model_and_its_undocumented_fields():
    class Loose(BaseModel):
        x: int

    assert _problems(Loose) == [
        f"{__name__}.{Loose.__qualname__} does not derive from records.Record",
        f"{__name__}.{Loose.__qualname__}: extra is None, not 'forbid'",
        f"{__name__}.{Loose.__qualname__}: fields without a docstring: ['x']",
    ]


def test_the_strict_base_refuses_unknown_fields():
    class Probe(Record):
        x: int
        """A field."""

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Probe.model_validate({"x": 1, "y": 2})
    assert Probe.model_fields["x"].description == "A field."
