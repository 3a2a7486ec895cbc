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

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from draligned.cards import LoadedCard, require_runnable
from draligned.executors import UnknownHarness, executor_for
from draligned.executors.base import Budget
from draligned.harness import ContractError, LoadedContract, load_contract
from draligned.hashing import sha256_bytes
from draligned.models import ModelDeclaration
from draligned.models.base import PROTOCOLS
from draligned.models.options import OPTIONS, options_problem
from draligned.records import Record, Slot
from draligned.strict_json import JSONInputError, check_depth
from draligned.tools.search_spec import SearchSpec


class StudyError(Exception):
    """A study file that cannot be run; the message names the file and field."""


Loc = tuple[str | int, ...]


def field_error(loc: Loc, message: str) -> ValidationError:
    """A validation error of the study field at ``loc`` (e.g. ``("models", 0, "protocol")``) saying ``message``."""
    kind = PydanticCustomError("study", "{message}", {"message": message})
    return ValidationError.from_exception_data("study", [InitErrorDetails(type=kind, loc=loc, input=None)])


def dotted(loc: Loc) -> str:
    """A field location as the study errors name it: ``models[0].protocol``, ``budget.max_tokens``."""
    return "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".")


MAX_SEEDS = 10_000
"""Most replicates a study may ask for (slot expansion is eager)."""
MAX_CONCURRENCY = 256
"""Most runs in flight at once."""
MAX_SLOTS = 100_000
"""Most slots one study may expand to (card × arm × model × harness × seed × search cell)."""
BUDGET_MAX = {"max_model_calls": 100_000, "max_tool_calls": 100_000, "max_tokens": 10**10, "max_wall_s": 7 * 86_400}
"""Upper bound of each per-run budget limit (a larger one is a typo, not a budget)."""


class StudySpec(Record, strict=True):
    """The contents of a study TOML file."""

    name: str = Field(min_length=1, max_length=200, pattern=r"\S")
    """Study name (recorded in every slot)."""
    cards: list[str] = Field(min_length=1)
    """Card files or globs, relative to the study file."""
    arms: list[str] | Literal["all"] = "all"
    """Arms/cells to run; "all" runs every arm of each card (P, Q or PP, QP, PQ, QQ)."""
    models: list[ModelDeclaration] = Field(min_length=1)
    """``[[models]]`` tables."""
    harnesses: list[str] = Field(default_factory=lambda: ["H00"], min_length=1)
    """Harness ids; each has a frozen contract in ``harnesses/``."""
    seeds: int = Field(1, ge=1, le=MAX_SEEDS)
    """Replicates per (card, arm, model, harness); seeds 0..n-1, shared by the arms of a pair."""
    budget: Budget = Field(default_factory=Budget)
    """Per-run budget."""
    concurrency: int = Field(4, ge=1, le=MAX_CONCURRENCY)
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
    max_cost_usd: float | None = None
    """Study-wide spend cap in US dollars over the archive's runs of this study: once reached no new run
    starts (running ones finish; their slots stay unstarted for a later ``run``). Needs every model priced."""

    @field_validator("arms")
    @classmethod
    def _some_arms(cls, v: list[str] | str) -> list[str] | str:
        if isinstance(v, list) and not v:
            raise ValueError("lists no arm (use \"all\" or e.g. [\"P\", \"Q\"])")
        return v

    @field_validator("harnesses")
    @classmethod
    def _distinct_harnesses(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"lists a harness twice ({v})")
        return v

    @model_validator(mode="after")
    def _unique_model_names(self) -> StudySpec:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise field_error(("models",), f"model names must be unique ({names})")
        return self

    @model_validator(mode="after")
    def _known_protocols(self) -> StudySpec:
        for i, m in enumerate(self.models):
            if m.protocol not in PROTOCOLS:
                raise field_error(("models", i, "protocol"), f"model {m.name!r}: unknown protocol {m.protocol!r} "
                                                             f"(known: {', '.join(sorted(PROTOCOLS))})")
            if problem := options_problem(m.options, OPTIONS[m.protocol]):
                raise field_error(("models", i, "options", problem[0]), f"model {m.name!r}: {problem[1]}")
        return self

    @model_validator(mode="after")
    def _positive_budget(self) -> StudySpec:
        """Limits must be positive (a zero or negative limit ends every run before its first call) and
        below a sane bound."""
        for key, value in self.budget.model_dump().items():
            if key == "max_cost_usd" and not value > 0:
                raise field_error(("budget", key), f"must be more than 0 (got {value})")
            if key != "max_cost_usd" and value < 1:
                raise field_error(("budget", key), f"must be at least 1 (got {value})")
            if key in BUDGET_MAX and value > BUDGET_MAX[key]:
                raise field_error(("budget", key), f"must be at most {BUDGET_MAX[key]} (got {value})")
        if self.max_cost_usd is not None and not self.max_cost_usd > 0:
            raise field_error(("max_cost_usd",), f"must be more than 0 (got {self.max_cost_usd})")
        return self

    @model_validator(mode="after")
    def _priced_for_cost_caps(self) -> StudySpec:
        """A cost cap can only be kept when every call has a price: refuse it for an unpriced model."""
        cap = ("budget", "max_cost_usd") if self.budget.max_cost_usd is not None else (
            ("max_cost_usd",) if self.max_cost_usd is not None else None)
        if cap is not None:
            for i, m in enumerate(self.models):
                if m.price is None:
                    raise field_error(("models", i, "price"), f"model {m.name!r} has no price table, so the "
                                                              f"cost cap {dotted(cap)} cannot be kept for it")
        return self

    @model_validator(mode="after")
    def _corpus_with_corpus_backend(self) -> StudySpec:
        if self.search.backend == "corpus" and self.corpus is None:
            raise field_error(("corpus",), "required with the corpus search backend")
        return self


class Study(Record, arbitrary_types_allowed=True):
    """A loaded study: the spec plus resolved paths and hashes; its validators check what needs the files."""

    spec: StudySpec
    """The study file's fields, validated."""
    path: Path
    """The study file."""
    sha256: str
    """sha256 of the study file's bytes (every run names it)."""
    cards: list[LoadedCard]
    """The factor cards the study names, loaded and validated."""
    contracts: dict[str, LoadedContract]
    """The frozen harness contract of each harness id the study runs."""
    archive_root: Path
    """Where the runs are archived (the study's ``archive``, or the command's override)."""
    corpus_path: Path | None
    """The corpus file of corpus search; None for pool search."""
    pool_paths: dict[str, Path] = {}
    """The pool file of each card id for pool search (empty for corpus search)."""

    @model_validator(mode="after")
    def _unique_card_ids(self) -> Study:
        ids = [c.card.card_id for c in self.cards]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise field_error(("cards",), f"card ids must be unique across files ({dup})")
        return self

    @model_validator(mode="after")
    def _arms_apply(self) -> Study:
        """A typo (or an arm no listed card has) would otherwise drop slots silently."""
        if self.spec.arms == "all":
            return self
        known = {a for c in self.cards for a in c.card.arms()}
        if unknown := [a for a in self.spec.arms if a not in known]:
            raise field_error(("arms",), f"{unknown} is not an arm of any listed card (arms: {sorted(known)})")
        if armless := [c.card.card_id for c in self.cards if not set(c.card.arms()) & set(self.spec.arms)]:
            raise field_error(("arms",), f"no listed arm applies to card(s) {armless}")
        return self

    @model_validator(mode="after")
    def _bounded_slots(self) -> Study:
        """Checked before slots are expanded, so a huge product is refused instead of hanging."""
        s = self.spec
        arms = sum(len(c.card.arms()) if s.arms == "all" else len(set(c.card.arms()) & set(s.arms))
                   for c in self.cards)
        n = arms * s.seeds * len(s.models) * len(s.harnesses) * len(s.search.conditions())
        if n > MAX_SLOTS:
            raise field_error(("seeds",), f"the study expands to {n} slots, more than {MAX_SLOTS}; "
                                          f"use fewer seeds, cards, models or harnesses")
        return self

    @model_validator(mode="after")
    def _harnesses_have_executors(self) -> Study:
        for i, h in enumerate(self.spec.harnesses):
            try:
                executor_for(h)
            except UnknownHarness as exc:
                raise field_error(("harnesses", i), f"{self.contracts[h].path}: {exc}") from None
        return self

    @model_validator(mode="after")
    def _corpus_exists(self) -> Study:
        if self.corpus_path is not None and not self.corpus_path.exists():
            raise field_error(("corpus",), f"{self.corpus_path} does not exist")
        return self

    @model_validator(mode="after")
    def _pool_per_card(self) -> Study:
        if self.spec.search.backend != "pool":
            return self
        for lc in self.cards:
            card = lc.card.card_id
            if card not in self.pool_paths:
                raise field_error(("search", "pools"), f"no pool file for card {card!r}")
            if not self.pool_paths[card].exists():
                raise field_error(("search", "pools", card), f"{self.pool_paths[card]} does not exist")
        return self

    @property
    def cache_root(self) -> Path:
        """Where the replay cache lives."""
        return self.path.parent / self.spec.cache_dir if self.spec.cache_dir else self.archive_root / "cache"

    @property
    def acquisition_root(self) -> Path:
        """Where the web acquisition store lives (web backends)."""
        store = self.spec.search.store_dir
        return self.path.parent / store if store else self.archive_root / "acquisition"

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


def _card_paths(spec: StudySpec, base: Path) -> list[Path]:
    """The card files the spec's patterns name, in order, each once."""
    card_paths: list[Path] = []
    for pattern in spec.cards:
        matches = [Path(m) for m in sorted(glob.glob(str(base / pattern))) if Path(m).name != "schema.json"]
        if not matches:
            raise field_error(("cards",), f"{pattern!r} matches no card file")
        card_paths += matches
    return list(dict.fromkeys(card_paths))


def _contracts(spec: StudySpec) -> dict[str, LoadedContract]:
    try:
        return {h: load_contract(h) for h in spec.harnesses}
    except ContractError as exc:
        raise field_error(("harnesses",), str(exc)) from exc


def _read(path: Path) -> tuple[bytes, dict]:
    """The study file's bytes and TOML contents."""
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
        check_depth(data)
        return raw, data
    except FileNotFoundError as exc:
        raise StudyError(f"{path}: no such study file") from exc
    except OSError as exc:
        raise StudyError(f"{path}: cannot read the study file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise StudyError(f"{path}: not UTF-8 text (byte {exc.start}): {exc.reason}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: invalid TOML: {exc}") from exc
    except RecursionError:
        raise StudyError(f"{path}: invalid TOML: nested too deeply") from None
    except JSONInputError as exc:
        raise StudyError(f"{path}: invalid TOML: {exc}") from exc


def load_study(path: str | Path, archive_override: str | Path | None = None) -> Study:
    """Parse, validate and resolve a study file. Cards must validate and be PASS (CardError otherwise).
    Every other problem is a StudyError ``<study file>: field <field>: <message>``."""
    path = Path(path)
    raw, data = _read(path)
    base = path.parent
    try:
        spec = StudySpec.model_validate(data)
        return Study(spec=spec, path=path, sha256=sha256_bytes(raw),
                     cards=[require_runnable(p) for p in _card_paths(spec, base)], contracts=_contracts(spec),
                     archive_root=Path(archive_override) if archive_override else base / spec.archive,
                     corpus_path=None if spec.corpus is None else base / spec.corpus,
                     pool_paths={card: base / p for card, p in spec.search.pools.items()})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise StudyError(f"{path}: field {dotted(err['loc'])}: {err['msg'].removeprefix('Value error, ')}") from exc
