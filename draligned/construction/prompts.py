"""Versioned construction prompts and answer schemas, the models that answer them, and raw replies.

The files live in ``construction/prompts/`` (a used file is never edited: a change is a new ``.vN``);
each card records the sha256 of the template and schema that made or judged it. Model answers take
the evaluator's structured-output path (``schema_checked``: one JSON value, schema-checked, no
repair) and every raw reply is stored, by its sha256, before it is parsed.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from draligned.archive.store import write_once
from draligned.cards import Card
from draligned.data import data_dir
from draligned.evaluator.ingest import schema_checked
from draligned.hashing import sha256_bytes
from draligned.models.base import PROTOCOLS, ModelAPI, ModelDeclaration, get_model
from draligned.records import Message, ModelReply, Record

PROPOSAL_PROMPT = "proposal.v1.md"
PROPOSAL_SCHEMA = "proposal.v1.schema.json"
VERIFY_PROMPT = "verify.v1.md"
VERIFY_SCHEMA = "verify.v1.schema.json"

CONSTRUCTION_PROTOCOLS: dict[str, str] = {
    **PROTOCOLS,
    "sim-proposer": "draligned.construction.sim:SimProposer",
    "sim-verifier": "draligned.construction.sim:SimVerifier",
}
"""Protocols a construction model may declare: the agent protocols and the construction SIMULATORs
(registered here, where construction lives, so a study cannot declare them)."""

SIM_PROTOCOLS = ("sim-proposer", "sim-verifier")
SIM_PROPOSER = ModelDeclaration(name="sim-proposer", protocol="sim-proposer", model="sim-proposer-v1")
SIM_VERIFIERS = (
    ModelDeclaration(name="sim-verifier-a", protocol="sim-verifier", model="sim-verifier-v1"),
    ModelDeclaration(name="sim-verifier-b", protocol="sim-verifier", model="sim-verifier-v1",
                     options={"strict": True}),
)
"""``--model sim``: two SIMULATOR verifiers, the second stricter (so disagreement can happen offline)."""


class ConstructionError(ValueError):
    """Construction input that cannot be used (bad model file, directory, rule); exit 2."""


class PromptFile(Record, frozen=True):
    """One versioned template or schema file and the sha256 of its bytes."""

    name: str
    """File name under construction/prompts/, e.g. verify.v1.md."""
    sha256: str
    """sha256 of the exact bytes."""
    text: str
    """The file's text."""


def prompt_file(name: str) -> PromptFile:
    """A bundled prompt or schema file with its hash."""
    raw = (data_dir("construction") / "prompts" / name).read_bytes()
    return PromptFile(name=name, sha256=sha256_bytes(raw), text=raw.decode("utf-8"))


def proposal_schema() -> dict[str, Any]:
    """The proposal answer schema, derived from the card schema (its factor and message definitions)."""
    card = Card.model_json_schema()
    factor_list = {"type": "array", "items": {"$ref": "#/$defs/Factor"}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Factor proposal answer v1 (the card schema's Factor and Message definitions)",
        "type": "object", "additionalProperties": False,
        "required": ["profile", "factors", "sources", "message"],
        "properties": {
            "profile": card["properties"]["profile"],
            "factors": card["properties"]["factors"],
            "second_factor_alternatives": factor_list,
            "sources": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["factor_id", "attribute", "value"],
                "properties": {"factor_id": {"type": "string", "minLength": 1},
                               "attribute": {"type": "string", "minLength": 1},
                               "value": {"type": "string", "minLength": 1}}}},
            "message": {"$ref": "#/$defs/Message"},
        },
        "$defs": card["$defs"],
    }


def proposal_schema_json() -> str:
    """The proposal schema as committed in construction/prompts/proposal.v1.schema.json."""
    return json.dumps(proposal_schema(), indent=2, ensure_ascii=False) + "\n"


def load_model(spec: str, role: str) -> ModelDeclaration:
    """``spec`` is a TOML file whose ``[model]`` table is a model declaration (an evaluator file works)."""
    path = Path(spec)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConstructionError(f"{role} model {spec!r}: {exc} (give 'sim' or a TOML file with a [model] "
                                "table)") from None
    if not isinstance(data.get("model"), dict):
        raise ConstructionError(f"{path}: model: missing [model] table")
    try:
        return ModelDeclaration.model_validate(data["model"])
    except ValidationError as exc:
        raise ConstructionError(f"{path}: model: {exc}") from None


def make_model(declaration: ModelDeclaration) -> ModelAPI:
    """The provider for a construction model, checked ready (its key present) before any call."""
    model = get_model(declaration, CONSTRUCTION_PROTOCOLS)
    model.check_ready()
    return model


def _structured(reply: ModelReply, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """The reply's JSON answer under ``schema`` (no repair), or why not; a truncated, filtered or refused
    reply says so, since its text alone would only read as broken JSON."""
    data, error = schema_checked(reply.text, schema)
    if error is not None and reply.finish_reason not in (None, "stop"):
        error += f" (finish_reason {reply.finish_reason}{': ' + reply.refusal if reply.refusal else ''})"
    return data, error


def simulated(declaration: ModelDeclaration) -> str:
    """How decisions name a model: a SIMULATOR says so."""
    label = ", a SIMULATOR: deterministic rules, not a language model" if declaration.protocol in SIM_PROTOCOLS else ""
    return f"{declaration.name} ({declaration.protocol}, model {declaration.model}{label})"


async def ask(model: ModelAPI, prompt: str, seed: int, responses: Path,
              schema: PromptFile) -> tuple[Any, str | None, str]:
    """One user message to ``model``; the raw reply is stored under ``responses`` before it is parsed.

    Returns (answer, None) or (None, why it is unreadable), and the sha256 of the stored raw reply."""
    reply = await model.generate([Message(role="user", content=prompt)], [], seed)
    raw = reply.raw_response.encode("utf-8")
    sha = sha256_bytes(raw)
    write_once(responses / f"{sha}.txt", raw)
    return (*_structured(reply, json.loads(schema.text)), sha)


def proposer_declaration(spec: str) -> ModelDeclaration:
    """``sim`` (the SIMULATOR proposer) or a model file."""
    return SIM_PROPOSER if spec == "sim" else load_model(spec, "proposer")


def verifier_declarations(specs: list[str], reuse_single: bool = False) -> tuple[ModelDeclaration, ModelDeclaration]:
    """Two verifiers from ``--model`` values: ``sim`` alone means both SIMULATORs; otherwise two specs
    (``sim`` or model files). With ``reuse_single`` one model file serves as both (the second renamed)."""
    if specs in ([], ["sim"]):
        return SIM_VERIFIERS
    if len(specs) == 1 and reuse_single:
        one = load_model(specs[0], "verifier")
        return one, one.model_copy(update={"name": f"{one.name}-2"})
    if len(specs) != 2:
        raise ConstructionError(f"two verifiers are needed (--model M1 --model M2, or --model sim), got {len(specs)}")
    a, b = (SIM_VERIFIERS[i] if s == "sim" else load_model(s, "verifier") for i, s in enumerate(specs))
    if a.name == b.name:
        raise ConstructionError(f"the two verifiers need different names, both are {a.name!r}")
    return a, b
