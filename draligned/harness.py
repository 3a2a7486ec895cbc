"""Frozen harness contracts (``harnesses/<id>.json``): loaded, hashed, and turned into tool specs."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import jsonschema
from pydantic import ValidationError

from draligned.data import data_dir
from draligned.hashing import sha256_bytes
from draligned.records import Record, ToolSpec
from draligned.strict_json import schema_validator

HARNESS_DIR = data_dir("harnesses")
"""The bundled harness contracts (the checkout's ``harnesses/``, shipped in the wheel)."""


class ContractError(Exception):
    """A harness contract that is missing or malformed."""


class Role(Record):
    """One agent context of a harness and the tools it may call."""

    role: str
    """Role name: ``executor`` (the root context) or ``worker`` (an H-D delegated context)."""
    tools: list[str]
    """Names of the tools this context is offered, in the order sent."""
    system_prompt: str | None = None
    """System message of this context; None for the executor, whose prompt is the contract's."""


class Limits(Record):
    """Caps of the acquisition tools every harness offers."""

    search_results: int
    """Results a search returns at most."""
    snippet_chars: int
    """Characters of each search result's snippet."""
    read_chars: int
    """Characters of a page that read returns."""


class WorkspaceLimits(Limits):
    """Caps of a workspace harness (H-W, H-D): the acquisition caps plus file, shell and snapshot caps."""

    view_chars: int
    """Characters view_file returns at most per call."""
    shell_timeout_s: int
    """Wall-clock seconds before a shell command is killed."""
    shell_output_chars: int
    """Characters of a shell command's stdout plus stderr returned."""
    shell_cpu_s: int
    """CPU seconds of a shell command."""
    shell_memory_mb: int
    """Address space of a shell command, in MiB."""
    shell_file_mb: int
    """Largest file a shell command may write, in MiB."""
    shell_processes: int
    """Processes and threads a shell command may add."""
    shell_open_files: int
    """Open file descriptors of a shell command."""
    snapshot_mb: int
    """MiB of workspace files read into each snapshot; larger remainders are listed by size only."""
    workspace_mb: int = 256
    """MiB of files a workspace (the root's, and each H-D worker's) may hold. A file write over it is
    refused and a shell command that leaves the workspace over it returns an over-quota tool error.
    The default is code, not contract text, so contracts written before it keep their sha256; every
    workspace run records the value it ran with (notice ``workspace_limits``)."""
    shell_tmp_mb: int = 64
    """Size of the shell sandbox's private /tmp tmpfs, in MiB (a default in code, recorded like
    ``workspace_mb``)."""
    batch_tasks: int | None = None
    """Tasks one delegate_batch call may carry (H-D only)."""


class Contract(Record):
    """A frozen harness contract; its file sha256 is recorded in every run."""

    harness: str
    """Harness id (H00, H-W, H-D)."""
    version: int
    """Contract version; a change is a new version, never an edit of one already used."""
    description: str
    """What the harness is."""
    roles: list[Role]
    """Contexts and the tools each may call."""
    system_prompt: str
    """System message text sent to the executor."""
    tools: list[ToolSpec]
    """Tools with their JSON Schemas, in the order sent."""
    limits: WorkspaceLimits | Limits
    """Numeric limits of tool returns: the acquisition caps, plus the workspace caps in H-W and H-D."""
    returns: dict[str, str]
    """Fixed return texts of tools (e.g. "Draft saved.")."""
    rules: dict[str, str]
    """Loop rules in words, for readers of the archive."""

    def role(self, name: str) -> Role:
        """The context named ``name``; ContractError when the contract has none."""
        found = next((r for r in self.roles if r.role == name), None)
        if found is None:
            raise ContractError(f"harness {self.harness}: field roles: no role {name!r}")
        return found

    def workspace_limits(self) -> WorkspaceLimits:
        """The limits of a workspace harness; ContractError when the contract lacks the workspace caps."""
        if not isinstance(self.limits, WorkspaceLimits):
            raise ContractError(f"harness {self.harness}: field limits: no workspace limits (view_chars, shell_*, "
                                f"snapshot_mb)")
        return self.limits


class LoadedContract(Record):
    """A contract with the path and sha256 of the exact file it came from."""

    contract: Contract
    """The parsed contract."""
    path: str
    """File path."""
    sha256: str
    """sha256 of the file bytes."""
    raw: bytes
    """The file bytes (archived as a blob)."""

    @cached_property
    def validators(self) -> dict[str, jsonschema.protocols.Validator]:
        """Tool name -> a validator of its parameters, the schemas checked against their metaschema once,
        when the contract is loaded (not once per run)."""
        return {t.name: schema_validator(t.parameters) for t in self.contract.tools}


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
    loaded = LoadedContract(contract=contract, path=str(path), sha256=sha256_bytes(raw), raw=raw)
    for i, tool in enumerate(contract.tools):
        try:
            schema_validator(tool.parameters)
        except jsonschema.SchemaError as exc:
            raise ContractError(f"{path}: field tools[{i}].parameters: not a JSON Schema: {exc.message}") from None
    return loaded
