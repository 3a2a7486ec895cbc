"""Every pydantic model of draligned has one strict base (records.Record) and a docstring on every field."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from pydantic import BaseModel, ValidationError

import draligned
from draligned.records import Record


def _models() -> list[type[BaseModel]]:
    """Every BaseModel subclass defined in a draligned module (the CLI entry module is not imported)."""
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
    return sorted(ours, key=lambda m: (m.__qualname__, m.__module__))  # one order in every xdist worker


MODELS = _models()


def test_there_are_models_to_check():
    assert len(MODELS) > 100 and Record in MODELS


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.__module__}.{m.__qualname__}")
def test_model_is_strict_and_documents_every_field(model: type[BaseModel]):
    assert issubclass(model, Record), f"{model.__module__}.{model.__qualname__} does not derive from records.Record"
    assert model.model_config.get("extra") == "forbid"
    undocumented = [name for name, field in model.model_fields.items() if not field.description]
    assert undocumented == [], f"{model.__qualname__}: fields without a docstring: {undocumented}"


def test_the_strict_base_refuses_unknown_fields():
    class Probe(Record):
        x: int
        """A field."""

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Probe.model_validate({"x": 1, "y": 2})
    assert Probe.model_fields["x"].description == "A field."
