"""Frozen harness contracts (``harnesses/<id>.json``): loaded, hashed, and turned into tool specs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from draligned.data import data_dir
from draligned.hashing import sha256_bytes
from draligned.records import ToolSpec

HARNESS_DIR = data_dir("harnesses")
"""The bundled harness contracts (the checkout's ``harnesses/``, shipped in the wheel)."""


class ContractError(Exception):
    """A harness contract that is missing or malformed."""


class Contract(BaseModel):
    """A frozen harness contract; its file sha256 is recorded in every run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    harness: str
    """Harness id (H00, H-W, H-D)."""
    version: int
    """Contract version; a change is a new version, never an edit of one already used."""
    description: str
    """What the harness is."""
    roles: list[dict[str, Any]]
    """Contexts and the tools each may call."""
    system_prompt: str
    """System message text sent to the executor."""
    tools: list[ToolSpec]
    """Tools with their JSON Schemas, in the order sent."""
    limits: dict[str, int]
    """Numeric limits of tool returns (search_results, snippet_chars, read_chars, ...)."""
    returns: dict[str, str]
    """Fixed return texts of tools (e.g. "Draft saved.")."""
    rules: dict[str, str]
    """Loop rules in words, for readers of the archive."""


class LoadedContract(BaseModel):
    """A contract with the path and sha256 of the exact file it came from."""

    contract: Contract
    """The parsed contract."""
    path: str
    """File path."""
    sha256: str
    """sha256 of the file bytes."""
    raw: bytes
    """The file bytes (archived as a blob)."""


def load_contract(harness: str, directory: Path = HARNESS_DIR) -> LoadedContract:
    """Load ``<directory>/<harness>.json``; errors name the file and field."""
    path = directory / f"{harness}.json"
    if not path.exists():
        raise ContractError(f"{path}: no contract for harness {harness!r}")
    raw = path.read_bytes()
    try:
        contract = Contract.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise ContractError(f"{path}: {exc}") from exc
    if contract.harness != harness:
        raise ContractError(f"{path}: field harness is {contract.harness!r}, expected {harness!r}")
    return LoadedContract(contract=contract, path=str(path), sha256=sha256_bytes(raw), raw=raw)
