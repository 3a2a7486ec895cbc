"""Ranking strength of the PERSPECTRUM searches, calibrated on tuning claims only (appendix F).

The paper fixes its search configuration on calibration tasks before the test. Our searches
have no LLM, so how strongly they distort the evidence opened is a free choice, and choosing it
freely would decide how much CESS can gain over the Opened Mean. It is therefore calibrated to a
documented target: the paper's Opened Mean in Table 8 (MAE 0.4108, ranking sensitivity S
0.9574). The Opened Mean uses no outcome model and no coefficient, so the target says only how
distorted the opened evidence is. On a fixed subsample of tuning claims (every fifth, one seed
per cell, every controller and stopping rule) each grid point of ranking tilt × softmax
temperature × exploration ε × stop-recommendation rule is searched, and the point with the
smallest |MAE / 0.4108 − 1| + |S / 0.9574 − 1| is chosen (ties: first in grid order).
Test claims never enter.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from draligned.cess.batch import TrajectoryBatch
from draligned.cess.estimators import opened_mean
from draligned.cess.metrics import mae, per_question_sensitivity
from draligned.cess.perspectrum import PerspectrumClaim
from draligned.cess.searches import SearchSettings, run_searches
from draligned.cess.stop_rules import STOP_RULES, StopRule
from draligned.records import Record

TARGET_MAE = 0.4108
"""Paper Table 8, Opened Mean MAE."""
TARGET_S = 0.9574
"""Paper Table 8, Opened Mean ranking sensitivity S."""
RANKING_STRENGTHS = (0.5, 0.75, 1.0, 1.25)
"""Logit tilt per unit of visible stance under pro / anti ranking."""
TEMPERATURES = (0.3, 1.0)
"""Softmax temperatures on relevance."""
EPSILONS = (0.1, 0.2)
"""Uniform exploration shares."""
SUBSAMPLE_STEP = 5
"""Every fifth tuning claim is a calibration claim."""


class CalibrationPoint(Record):
    """One searched grid point and the Opened Mean it produces on the calibration claims."""

    ranking_strength: float
    """Logit tilt per unit of visible stance."""
    temperature: float
    """Softmax temperature."""
    epsilon: float
    """Uniform exploration share."""
    stop_rule: StopRule
    """Stop-recommendation rule of adaptive stopping."""
    opened_mean_mae: float
    """Opened Mean MAE on the calibration claims."""
    opened_mean_s: float
    """Opened Mean ranking sensitivity S (Eq. 16) on the calibration claims."""
    loss: float
    """|MAE / target − 1| + |S / target − 1|."""


class Calibration(Record):
    """The calibration search and its choice."""

    target_mae: float
    """Target Opened Mean MAE (paper Table 8)."""
    target_s: float
    """Target Opened Mean S (paper Table 8)."""
    claims: int
    """Tuning claims searched."""
    runs_per_point: int
    """Trajectories per grid point."""
    points: list[CalibrationPoint]
    """Every grid point, in grid order."""
    chosen: CalibrationPoint
    """The grid point with the smallest loss."""


def settings_at(base: SearchSettings, point: CalibrationPoint) -> SearchSettings:
    """``base`` with the calibrated ranking strength, temperature, ε and stop rule."""
    return base.model_copy(update={
        "ranking_strength": point.ranking_strength, "temperature": point.temperature,
        "epsilon": point.epsilon, "stop_rule": point.stop_rule})


def _opened_mean_fit(claims: Sequence[PerspectrumClaim], settings: SearchSettings) -> tuple[float, float, int]:
    trajectories, labels = run_searches(claims, settings)
    batch = TrajectoryBatch.from_trajectories(trajectories)
    question = np.array([label.claim_id for label in labels])
    est = opened_mean(batch)
    s = per_question_sensitivity(est, question, np.array([label.config for label in labels]),
                                 np.array([label.ranking for label in labels]))
    return mae(est, batch.theta_star, question), float(s.mean()), len(labels)


def calibrate(
    tuning: Sequence[PerspectrumClaim], base: SearchSettings, stop_rules: Sequence[StopRule] = STOP_RULES
) -> Calibration:
    """Search the grid on every ``SUBSAMPLE_STEP``-th tuning claim (one seed) and pick the target's closest."""
    claims = list(tuning)[::SUBSAMPLE_STEP]
    points, runs = [], 0
    for tilt, temp, eps, rule in itertools.product(RANKING_STRENGTHS, TEMPERATURES, EPSILONS, stop_rules):
        point = CalibrationPoint(ranking_strength=tilt, temperature=temp, epsilon=eps, stop_rule=rule,
                                 opened_mean_mae=0.0, opened_mean_s=0.0, loss=0.0)
        om_mae, om_s, runs = _opened_mean_fit(claims, settings_at(base, point).model_copy(update={"seeds": 1}))
        loss = abs(om_mae / TARGET_MAE - 1) + abs(om_s / TARGET_S - 1)
        points.append(point.model_copy(update={"opened_mean_mae": om_mae, "opened_mean_s": om_s, "loss": loss}))
    chosen = min(points, key=lambda p: p.loss)
    return Calibration(target_mae=TARGET_MAE, target_s=TARGET_S, claims=len(claims), runs_per_point=runs,
                       points=points, chosen=chosen)
