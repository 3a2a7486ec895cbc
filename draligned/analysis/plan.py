"""Analysis plans: versioned TOML files that fix what a report reads and compares.

A plan names the archive subset, the arm comparisons (paper Table 5), the phases, and the
settings of retention, provenance (Table 35), agreement and CESS. Its file sha256 is written
into every output table so a number can be traced to the plan that produced it.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from draligned.cess import BOOTSTRAP_SEED
from draligned.hashing import sha256_bytes
from draligned.records import Record

PhaseSpec = Literal["requests", "draft:first", "draft:last", "final"]
ComparisonSpec = Literal["P-Q", "PP-QP", "PQ-QQ", "PP-PQ", "QP-QQ"]


class PlanError(ValueError):
    """A plan file that cannot be read; the message names the file and the field."""


class Subset(Record):
    """Which runs enter the report; an empty list means every value in the archive."""

    studies: list[str] = []
    """Study names."""
    cards: list[str] = []
    """Card ids."""
    models: list[str] = []
    """Model declaration names (they carry the reasoning setting)."""
    harnesses: list[str] = []
    """Harness ids (H00, H-W, H-D)."""


class Comparisons(Record):
    """Arm pairs; two-factor cards: PP-QP and PQ-QQ change factor 1, PP-PQ and QP-QQ factor 2."""

    include: list[ComparisonSpec] = ["P-Q", "PP-QP", "PQ-QQ", "PP-PQ", "QP-QQ"]
    """Comparisons reported (a card contributes those its factors define)."""
    primary: list[ComparisonSpec] = ["P-Q", "PP-QP"]
    """Comparisons used for headline figures (paper: PP vs QP is the primary pair)."""


class Retention(Record):
    """Draft-to-final retention (paper Tables 25 and 32)."""

    draft: Literal["first", "last"] = "last"
    """Which saved draft is compared with the final."""
    shingle_words: int = Field(5, ge=1, le=20)
    """Text change is 1 - Jaccard similarity of word shingles of this length."""
    structural_harnesses: list[str] = ["H-W", "H-D"]
    """Harnesses where the final is the saved file, so draft-final identity can be structural."""


class Provenance(Record):
    """Mechanical provenance (paper Table 35)."""

    fragment_chars: int = Field(20, ge=8)
    """A unit is linked when it shares a URL or a verbatim fragment of this many characters."""
    strict_fragment_chars: int = Field(40, ge=8)
    """The strict variant's fragment length."""


class Agreement(Record):
    """Agreement between the report's evaluator and others on the same documents."""

    evaluators: list[str] = []
    """Other evaluator ids compared with the report's evaluator (missing ones are reported)."""


class Cess(Record):
    """CESS side by side (an estimand of the opened evidence pool, not of the recommendation).

    Every CESS interval of the report resamples whole clusters: the card (the question, as in the
    paper's question-level bootstrap) by default, or the coarser study. Finer units (a pair, or a
    card's arm, model or harness) are refused: runs of one card share its pool and are not
    independent. Within a cluster every unit weighs the same (mean within cluster, then clusters
    equally; ``draligned.cess.metrics.cluster_ci``), as in `draligned cess pairs`. With the
    defaults the report prints the same difference and CI as `draligned cess pairs`.
    """

    bootstrap: int = Field(10_000, ge=100)
    """Cluster-bootstrap replicates (10,000, as `draligned cess pairs` and the paper)."""
    cluster: Literal["card", "study"] = "card"
    """Resampling unit: the card (question), or the coarser study; never finer."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Two-sided percentile interval level."""
    seed: int = BOOTSTRAP_SEED
    """Bootstrap random seed (the paper's, shared with `draligned cess pairs`)."""


class Plan(Record):
    """One analysis plan file."""

    name: str
    """Short name shown in every table header."""
    version: int = Field(ge=1)
    """Bump when the plan changes meaning; the file hash changes with any edit anyway."""
    description: str = ""
    """What the plan is for."""
    subset: Subset = Subset()
    """Runs that enter the report."""
    comparisons: Comparisons = Comparisons()
    """Arm pairs compared."""
    phases: list[PhaseSpec] = ["requests", "draft:first", "draft:last", "final"]
    """Phases read: the request readout, a draft version, the final."""
    primary_phase: PhaseSpec = "final"
    """Phase of the headline figures (the paper reports Final as primary)."""
    retention: Retention = Retention()
    """Draft-to-final settings."""
    provenance: Provenance = Provenance()
    """Provenance settings."""
    agreement: Agreement = Agreement()
    """Evaluator agreement settings."""
    cess: Cess = Cess()
    """CESS side-by-side settings."""


class LoadedPlan(Record):
    """A validated plan with the path and sha256 of the exact file bytes."""

    plan: Plan
    """The plan."""
    path: str
    """File it was read from."""
    sha256: str
    """sha256 of the file bytes; recorded in every output."""


def load_plan(path: str | Path) -> LoadedPlan:
    """Read and validate a plan; PlanError names the file and the dotted field on any problem."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PlanError(f"{path}: {exc}") from None
    return parse_plan(raw, str(path))


def parse_plan(raw: bytes, path: str) -> LoadedPlan:
    """Validate the bytes of a plan; ``path`` names where they came from in messages and the report."""
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PlanError(f"{path}: {exc}") from None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        msgs = [f"{path}: {'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise PlanError("\n".join(msgs)) from None
    if plan.primary_phase not in plan.phases:
        raise PlanError(f"{path}: primary_phase: {plan.primary_phase!r} is not among phases {plan.phases}")
    stray = [c for c in plan.comparisons.primary if c not in plan.comparisons.include]
    if stray:
        raise PlanError(f"{path}: comparisons.primary: {stray} not in comparisons.include")
    return LoadedPlan(plan=plan, path=path, sha256=sha256_bytes(raw))


def starter_plan(studies: list[str]) -> str:
    """A plan TOML over the given studies with every default written out: a starting point to edit."""
    listed = ", ".join(json.dumps(s, ensure_ascii=False) for s in studies)
    name = json.dumps(studies[0] if len(studies) == 1 else "archive", ensure_ascii=False)
    about = json.dumps(f"Every card, run and comparison of the studies {', '.join(studies)}.", ensure_ascii=False)
    cess = Cess()  # the CESS defaults, written out
    return f"""# Analysis plan over the studies {listed}. Edit it, keep it with your results and bump `version`
# when its meaning changes: its sha256 is written into every table of the report.
name = {name}
version = 1
description = {about}
phases = ["requests", "draft:first", "draft:last", "final"]
primary_phase = "final"

[subset]                       # an empty list means every value in the archive
studies = [{listed}]
cards = []
models = []
harnesses = []

[comparisons]
include = ["P-Q", "PP-QP", "PQ-QQ", "PP-PQ", "QP-QQ"]
primary = ["P-Q", "PP-QP"]

[retention]
draft = "last"
shingle_words = 5
structural_harnesses = ["H-W", "H-D"]

[provenance]
fragment_chars = 20
strict_fragment_chars = 40

[agreement]
evaluators = []

[cess]
bootstrap = {cess.bootstrap}
cluster = "{cess.cluster}"
confidence = {cess.confidence}
seed = {cess.seed}
"""
