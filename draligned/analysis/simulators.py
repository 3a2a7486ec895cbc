"""Which agent models and evaluators of a report are simulators, read from what the archive recorded.

An agent model is a simulator when its run records carry a simulator protocol (``sim``); an
evaluator when its archived configuration (``reads/<id>/evaluator.json``) declares one
(``sim-evaluator``). Nothing is inferred from names, so a real model called "sim-x" is not flagged
and a simulator under any name is.
"""

from __future__ import annotations

import json

from draligned.archive import Archive
from draligned.evaluator.sim import SIM_EVALUATOR_LABEL
from draligned.evaluator.storage import ReadStore
from draligned.models.sim import SIM_LABEL

SIMULATOR_PROTOCOLS = {"sim": SIM_LABEL, "sim-evaluator": SIM_EVALUATOR_LABEL}
"""Protocols that are offline simulators, not language models, with how they describe themselves."""


def simulators(archive: Archive, run_ids: set[str], evaluator_ids: list[str]) -> list[str]:
    """One line per simulator among the runs' agent models and the evaluators, in a stable order."""
    out: dict[str, None] = {}
    for rec in archive.records() + archive.started():
        if rec.run_id in run_ids and rec.protocol in SIMULATOR_PROTOCOLS:
            out[f"agent model {rec.slot.model} ({rec.requested_model}, protocol {rec.protocol}): "
                f"{SIMULATOR_PROTOCOLS[rec.protocol]}"] = None
    for evaluator_id in evaluator_ids:
        path = ReadStore(archive, evaluator_id).root / "evaluator.json"
        if not path.exists():
            continue
        protocol = json.loads(path.read_text())["evaluator"]["model"]["protocol"]
        if protocol in SIMULATOR_PROTOCOLS:
            out[f"evaluator {evaluator_id} (protocol {protocol}): {SIMULATOR_PROTOCOLS[protocol]}"] = None
    return sorted(out)
