"""Evaluator files: which model reads packets, with which versioned prompts and schemas (Table 16).

An evaluator is a TOML file; its ``evaluator_id`` names the directory its reads live in. The
sha256 of every template and schema file is part of the evaluator's snapshot, recorded with its
reads, so an edited template can never be mistaken for the one an archive was read with.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from draligned.hashing import sha256_bytes
from draligned.models.base import ModelDeclaration
from draligned.records import Record

PacketKind = Literal["requests", "document"]


class EvaluatorError(Exception):
    """An evaluator file that cannot be used."""


class PromptFiles(Record):
    """Paths (relative to the evaluator file) of the two packet kinds' files."""

    requests: str
    """File for request packets."""
    document: str
    """File for document packets."""


class EvaluatorFile(Record):
    """The evaluator TOML as written."""

    evaluator_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """Directory name of this evaluator's reads under ARCHIVE/reads/; one id, one configuration."""
    description: str = ""
    """What this evaluator is (say SIMULATOR for the offline lexical evaluator)."""
    max_tokens: int = 16384
    """Output cap per read, sent as the model's max_output_tokens."""
    concurrency: int = 4
    """Packets read at the same time."""
    prompts: PromptFiles
    """Prompt template files."""
    schemas: PromptFiles
    """Response JSON Schema files."""
    model: ModelDeclaration
    """The model that reads, declared as in studies."""


class Evaluator(Record):
    """A loaded evaluator: its file, the texts of its templates and schemas, and their hashes."""

    spec: EvaluatorFile
    """The evaluator file as parsed."""
    templates: dict[PacketKind, str]
    """Template text per packet kind."""
    schemas: dict[PacketKind, dict[str, Any]]
    """Parsed response schema per packet kind."""
    file_sha256: dict[str, str]
    """sha256 of each template and schema file, keyed prompt:<kind> / schema:<kind>."""

    @property
    def evaluator_id(self) -> str:
        return self.spec.evaluator_id

    def declaration(self) -> ModelDeclaration:
        """The model declaration with the evaluator's output cap as a request field."""
        model = self.spec.model
        return model.model_copy(update={"request": {**model.request, "max_output_tokens": self.spec.max_tokens}})

    def snapshot(self) -> dict[str, Any]:
        """What is recorded once per evaluator under the archive (no secrets: keys are env names)."""
        return {"evaluator": self.spec.model_dump(mode="json"), "file_sha256": self.file_sha256}


def load_evaluator(path: str | Path) -> Evaluator:
    """Parse an evaluator TOML and read its template and schema files."""
    path = Path(path)
    try:
        spec = EvaluatorFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise EvaluatorError(f"{path}: {exc}") from exc
    templates: dict[PacketKind, str] = {}
    schemas: dict[PacketKind, dict[str, Any]] = {}
    hashes: dict[str, str] = {}
    for kind in ("requests", "document"):
        for group, rel in (("prompt", getattr(spec.prompts, kind)), ("schema", getattr(spec.schemas, kind))):
            file = (path.parent / rel).resolve()
            try:
                raw = file.read_bytes()
            except OSError as exc:
                raise EvaluatorError(f"{path}: {group} file for {kind}: {exc}") from exc
            hashes[f"{group}:{kind}"] = sha256_bytes(raw)
            if group == "prompt":
                templates[kind] = raw.decode("utf-8")
            else:
                schemas[kind] = json.loads(raw)
    return Evaluator(spec=spec, templates=templates, schemas=schemas, file_sha256=hashes)
