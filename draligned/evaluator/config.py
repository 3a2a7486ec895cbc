"""Evaluator files: which model reads packets, with which versioned prompts and schemas (Table 16).

An evaluator is a TOML file; its ``evaluator_id`` names the directory its reads live in. The
sha256 of every template and schema file is part of the evaluator's snapshot, recorded with its
reads, so an edited template can never be mistaken for the one an archive was read with.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import jsonschema
from pydantic import Field, ValidationError, field_validator

from draligned.hashing import sha256_bytes
from draligned.models.base import ModelDeclaration
from draligned.models.options import OPTIONS, options_problem
from draligned.records import Record
from draligned.strict_json import JSONInputError, check_depth, loads

PacketKind = Literal["requests", "document"]


class EvaluatorError(Exception):
    """An evaluator file that cannot be used."""


class PromptFiles(Record):
    """Paths (relative to the evaluator file) of the two packet kinds' files."""

    requests: str
    """File for request packets."""
    document: str
    """File for document packets."""


class SimEvaluatorOptions(Record, strict=True):
    """Options of the SIMULATOR evaluator (``protocol = "sim-evaluator"``)."""

    order_bias: bool = False
    """Call two-sided main advice for ALPHA: a position bias the mirrored reads must expose."""


EVALUATOR_OPTIONS: dict[str, type[Record]] = {**OPTIONS, "sim-evaluator": SimEvaluatorOptions}
"""The options model of each protocol an evaluator file may declare."""


class EvaluatorFile(Record, strict=True):
    """The evaluator TOML as written."""

    evaluator_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """Directory name of this evaluator's reads under ARCHIVE/reads/; one id, one configuration."""
    description: str = ""
    """What this evaluator is (say SIMULATOR for the offline lexical evaluator)."""
    max_tokens: int = Field(16384, ge=1, le=1_000_000)
    """Output cap per read, sent as the model's max_output_tokens."""
    concurrency: int = Field(4, ge=1, le=256)
    """Packets read at the same time (0 would never read anything)."""
    prompts: PromptFiles
    """Prompt template files."""
    schemas: PromptFiles
    """Response JSON Schema files."""
    model: ModelDeclaration
    """The model that reads, declared as in studies."""

    @field_validator("model")
    @classmethod
    def _typed_options(cls, model: ModelDeclaration) -> ModelDeclaration:
        """The model's options must be those of its protocol (a typo is refused, not ignored)."""
        kind = EVALUATOR_OPTIONS.get(model.protocol)
        if kind is not None and (problem := options_problem(model.options, kind)):
            raise ValueError(f"options.{problem[0]}: {problem[1]}")
        return model


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


def _schema(data: Any) -> dict[str, Any]:
    """A response schema: a JSON object that is a valid JSON Schema."""
    if not isinstance(data, dict):
        raise JSONInputError(f"a JSON Schema must be a JSON object, not {type(data).__name__}")
    jsonschema.validators.validator_for(data).check_schema(data)
    return data


def load_evaluator(path: str | Path) -> Evaluator:
    """Parse an evaluator TOML and read its template and schema files."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        check_depth(data)
        spec = EvaluatorFile.model_validate(data)
    except OSError as exc:
        raise EvaluatorError(f"{path}: cannot read the evaluator file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise EvaluatorError(f"{path}: not UTF-8 text (byte {exc.start}): {exc.reason}") from exc
    except RecursionError:
        raise EvaluatorError(f"{path}: invalid TOML: nested too deeply") from None
    except (tomllib.TOMLDecodeError, JSONInputError) as exc:
        raise EvaluatorError(f"{path}: invalid TOML: {exc}") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(file)"
        raise EvaluatorError(f"{path}: field {where}: {err['msg'].removeprefix('Value error, ')}") from exc
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
            try:
                if group == "prompt":
                    templates[kind] = raw.decode("utf-8")
                else:
                    schemas[kind] = _schema(loads(raw))
            except (UnicodeDecodeError, JSONInputError, jsonschema.SchemaError) as exc:
                why = exc.message if isinstance(exc, jsonschema.SchemaError) else str(exc)
                raise EvaluatorError(f"{path}: field {group}s.{kind}: {file.name}: {why}") from exc
    return Evaluator(spec=spec, templates=templates, schemas=schemas, file_sha256=hashes)
