"""Study specification (a TOML file) and its expansion into slots.

A slot is one cell of the cartesian product card × arm × model × harness × seed. Its id
is a hash of its definition (including the card, contract, model declaration and search
data hashes), so editing any of them makes new slots instead of silently reusing runs.
"""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from draligned.cards import LoadedCard, require_runnable
from draligned.executors.base import Budget
from draligned.harness import ContractError, LoadedContract, load_contract
from draligned.hashing import sha256_bytes
from draligned.models import ModelDeclaration
from draligned.models.base import PROTOCOLS
from draligned.records import Slot
from draligned.tools.pool_search import SearchSpec


class StudyError(Exception):
    """A study file that cannot be run; the message names the file and field."""


class StudySpec(BaseModel):
    """The contents of a study TOML file."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Study name (recorded in every slot)."""
    cards: list[str]
    """Card files or globs, relative to the study file."""
    arms: list[str] | Literal["all"] = "all"
    """Arms/cells to run; "all" runs every arm of each card (P, Q or PP, QP, PQ, QQ)."""
    models: list[ModelDeclaration]
    """``[[models]]`` tables."""
    harnesses: list[str] = Field(default_factory=lambda: ["H00"])
    """Harness ids; each has a frozen contract in ``harnesses/``."""
    seeds: int = 1
    """Replicates per (card, arm, model, harness); seeds 0..n-1, shared by the arms of a pair."""
    budget: Budget = Field(default_factory=Budget)
    """Per-run budget."""
    concurrency: int = 4
    """Runs in flight at once."""
    archive: str = "archive"
    """Archive root, relative to the study file unless absolute."""
    corpus: str | None = None
    """Search corpus (JSONL), relative to the study file; required unless ``[search]`` uses pools."""
    search: SearchSpec = Field(default_factory=SearchSpec)
    """``[search]``: the corpus backend (default) or logged candidate-pool search and its cells."""
    cache: Literal["off", "read-write", "read-only"] = "off"
    """Exact-input replay cache mode (``draligned run --cache`` overrides it)."""
    cache_dir: str | None = None
    """Replay cache directory, relative to the study file; default ``<archive>/cache``."""

    @field_validator("seeds", "concurrency")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


class Study(BaseModel):
    """A loaded study: the spec plus resolved paths and hashes."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    spec: StudySpec
    path: Path
    sha256: str
    cards: list[LoadedCard]
    contracts: dict[str, LoadedContract]
    archive_root: Path
    corpus_path: Path | None
    pool_paths: dict[str, Path] = {}

    @property
    def cache_root(self) -> Path:
        """Where the replay cache lives."""
        return self.path.parent / self.spec.cache_dir if self.spec.cache_dir else self.archive_root / "cache"

    def model_named(self, name: str) -> ModelDeclaration:
        return next(m for m in self.spec.models if m.name == name)

    def slots(self, search_sha256: str) -> list[Slot]:
        """Every slot, in a deterministic order (card, seed, model, harness, search cell, arm)."""
        out = []
        for lc in self.cards:
            arms = lc.card.arms() if self.spec.arms == "all" else [a for a in lc.card.arms() if a in self.spec.arms]
            for seed in range(self.spec.seeds):
                for m in self.spec.models:
                    for h in self.spec.harnesses:
                        for cond in self.spec.search.conditions():
                            for arm in arms:
                                out.append(Slot(
                                    study=self.spec.name, card_id=lc.card.card_id, card_sha256=lc.file_sha256,
                                    arm=arm, model=m.name, model_sha256=m.sha256, harness=h,
                                    contract_sha256=self.contracts[h].sha256, search_sha256=search_sha256,
                                    budget=self.spec.budget.model_dump(), seed=seed, search_condition=cond,
                                ))
        return out


def _check_budget(path: Path, budget: Budget) -> None:
    """Limits must be positive: a zero or negative limit ends every run before its first call."""
    for key, value in budget.model_dump().items():
        if value < 1:
            raise StudyError(f"{path}: field budget.{key}: must be at least 1 (got {value})")


def load_study(path: str | Path, archive_override: str | Path | None = None) -> Study:
    """Parse, validate and resolve a study file. Cards must validate and be PASS."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        spec = StudySpec.model_validate(tomllib.loads(raw.decode("utf-8")))
    except FileNotFoundError as exc:
        raise StudyError(f"{path}: no such study file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: invalid TOML: {exc}") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise StudyError(f"{path}: field {loc}: {err['msg']}") from exc
    base = path.parent
    names = [m.name for m in spec.models]
    if len(set(names)) != len(names):
        raise StudyError(f"{path}: field models: model names must be unique ({names})")
    for i, m in enumerate(spec.models):
        if m.protocol not in PROTOCOLS:
            raise StudyError(f"{path}: field models[{i}].protocol: model {m.name!r}: unknown protocol "
                             f"{m.protocol!r} (known: {', '.join(sorted(PROTOCOLS))})")
    _check_budget(path, spec.budget)
    card_paths: list[Path] = []
    for pattern in spec.cards:
        matches = sorted(glob.glob(str(base / pattern)))
        matches = [m for m in matches if Path(m).name != "schema.json"]
        if not matches:
            raise StudyError(f"{path}: field cards: {pattern!r} matches no card file")
        card_paths += [Path(m) for m in matches]
    cards = [require_runnable(p) for p in dict.fromkeys(card_paths)]
    ids = [c.card.card_id for c in cards]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise StudyError(f"{path}: field cards: card ids must be unique across files ({dup})")
    if spec.arms != "all":
        # A typo (or an arm no listed card has) would otherwise drop slots silently.
        known = {a for c in cards for a in c.card.arms()}
        if unknown := [a for a in spec.arms if a not in known]:
            raise StudyError(f"{path}: field arms: {unknown} is not an arm of any listed card "
                             f"(arms: {sorted(known)})")
        if armless := [c.card.card_id for c in cards if not set(c.card.arms()) & set(spec.arms)]:
            raise StudyError(f"{path}: field arms: no listed arm applies to card(s) {armless}")
    try:
        contracts = {h: load_contract(h) for h in spec.harnesses}
    except ContractError as exc:
        raise StudyError(f"{path}: field harnesses: {exc}") from exc
    archive_root = Path(archive_override) if archive_override else base / spec.archive
    corpus_path = None if spec.corpus is None else base / spec.corpus
    if corpus_path is not None and not corpus_path.exists():
        raise StudyError(f"{path}: field corpus: {corpus_path} does not exist")
    if spec.search.backend == "corpus" and corpus_path is None:
        raise StudyError(f"{path}: field corpus: required with the corpus search backend")
    pool_paths = {card: base / p for card, p in spec.search.pools.items()}
    if spec.search.backend == "pool":
        for card in ids:
            if card not in pool_paths:
                raise StudyError(f"{path}: field search.pools: no pool file for card {card!r}")
            if not pool_paths[card].exists():
                raise StudyError(f"{path}: field search.pools.{card}: {pool_paths[card]} does not exist")
    return Study(spec=spec, path=path, sha256=sha256_bytes(raw), cards=cards, contracts=contracts,
                 archive_root=archive_root, corpus_path=corpus_path, pool_paths=pool_paths)
