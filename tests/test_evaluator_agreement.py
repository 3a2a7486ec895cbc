"""Cohen's kappa reproduces Table 18 of the paper, including the undefined case."""

from __future__ import annotations

import pytest

from draligned.evaluator.agreement import cohen


def answers(yes: int, no: int, cannot: int) -> list[str]:
    return ["yes"] * yes + ["no"] * no + ["cannot"] * cannot


def test_h1_one_constant_rater_gives_kappa_zero():
    res = cohen(answers(69, 24, 1), answers(94, 0, 0))
    assert res.n == 94 and round(res.exact, 4) == 0.7340 and res.kappa == pytest.approx(0.0)


def test_h3_agreement_and_kappa():
    cr1 = answers(51, 43, 0)
    cr2 = ["yes"] * 51 + ["no"] + ["yes"] * 42  # CR2's single "no" falls on one of CR1's "no"
    res = cohen(cr1, cr2)
    assert round(res.exact, 4) == 0.5532 and round(res.kappa, 4) == 0.0252


def test_h4_kappa_undefined_when_neither_rater_varies():
    res = cohen(answers(94, 0, 0), answers(94, 0, 0))
    assert res.exact == 1.0 and res.kappa is None


def test_no_units():
    assert cohen([], []).kappa is None and cohen([], []).exact is None
