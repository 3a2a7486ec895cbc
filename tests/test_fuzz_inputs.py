"""Fuzzing every input kind (cards, study, evaluator, trajectories, corpus) from the bundled valid files.

Seeded and bounded: each kind gets random byte-level mutations (which may or may not stay valid: the
loader must answer with its own error type or a result, never another exception, and within a few
seconds) and mutations that are invalid by construction (the loader must refuse them). Issue 11,
"Done means": 300+ mutated files, zero tracebacks, hangs or silent acceptances.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from draligned.cards import CardError, validate_card_file
from draligned.cess.trajectory import TrajectoryError, load_trajectories
from draligned.evaluator.config import EvaluatorError, load_evaluator
from draligned.study import StudyError, load_study
from tests.study_helpers import REPO, write_study

SEED = 20261201
RANDOM_PER_KIND = 45
PER_CASE_S = 10
DEEP = "[" * 100_000 + "]" * 100_000

TRAJECTORY = {
    "trajectory_id": "t1", "task_id": "q1", "ranking": "pro", "budget": 2,
    "pool": {"doc_ids": ["d0", "d1", "d2"], "y": [1.0, -1.0, 0.0], "m": [0.1, 0.2, 0.3]},
    "rounds": [{"probs": [0.5, 0.25, 0.25], "chosen": "d0", "stop_prob": 0.0},
               {"probs": [0.2, 0.3, 0.5], "chosen": "d2", "stop_prob": 0.1, "y": 0.0}],
}


class Hang(Exception):
    """A loader ran past PER_CASE_S seconds."""


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def ring(signum, frame):
        raise Hang(f"no answer within {seconds} s")
    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Kind:
    """One input kind: its valid file, how it is loaded, and the loader's own error types."""

    name: str
    suffix: str
    valid: Callable[[Path], bytes]
    load: Callable[[Path], bool]
    """True when the file was accepted, False when refused with a clean error; anything else raises."""
    errors: tuple[type[Exception], ...]
    invalid: list[Callable[[bytes], bytes]]
    """Mutations whose result is invalid by construction."""


def _card_valid(tmp: Path) -> bytes:
    return (REPO / "factor_cards" / "travel_budget_en.json").read_bytes()


def _load_card(path: Path) -> bool:
    return validate_card_file(path) == []  # never raises: problems are the answer


def _study_valid(tmp: Path) -> bytes:
    return write_study(tmp, ["travel_budget_en.json"], name="valid").read_bytes()


def _load_study(path: Path) -> bool:
    load_study(path)
    return True


def _evaluator_valid(tmp: Path) -> bytes:
    text = (REPO / "evaluators" / "sim.toml").read_text().replace("../evaluator_prompts/",
                                                                  f"{REPO}/evaluator_prompts/")
    return text.encode()


def _load_evaluator(path: Path) -> bool:
    load_evaluator(path)
    return True


def _trajectories_valid(tmp: Path) -> bytes:
    other = TRAJECTORY | {"trajectory_id": "t2"}
    return (json.dumps(TRAJECTORY) + "\n" + json.dumps(other) + "\n").encode()


def _load_trajectories(path: Path) -> bool:
    return bool(load_trajectories(path))


def _corpus_valid(tmp: Path) -> bytes:
    return b"".join((REPO / "corpora" / "demo" / "corpus.jsonl").read_bytes().splitlines(keepends=True)[:6])


def _load_corpus(path: Path) -> bool:
    from draligned.tools.corpus import load_corpus
    return bool(load_corpus(path).documents)


def sub(old: str, new: str) -> Callable[[bytes], bytes]:
    """Replace the first ``old`` (which must be there) by ``new``."""
    def mutate(raw: bytes) -> bytes:
        assert old.encode() in raw, old
        return raw.replace(old.encode(), new.encode(), 1)
    mutate.__name__ = f"{old!r}->{new[:30]!r}"
    return mutate


def bad_byte(raw: bytes) -> bytes:
    return raw[:20] + b"\xff" + raw[20:]


def deep_json(raw: bytes) -> bytes:
    return DEEP.encode()


def deep_line(raw: bytes) -> bytes:
    return raw + DEEP.encode() + b"\n"


def deep_toml(raw: bytes) -> bytes:
    return raw + b"\nzzz = " + DEEP.encode() + b"\n"


def cut_json(raw: bytes) -> bytes:
    return raw[: len(raw) // 2]


def cut_line(raw: bytes) -> bytes:
    first = raw.index(b"\n")
    return raw[: first // 2] + b"\n" + raw[first + 1:]


def empty(raw: bytes) -> bytes:
    return b"\n\n"


def repeat_first_line(raw: bytes) -> bytes:
    return raw + raw[: raw.index(b"\n") + 1]


def repeat_key(key: str) -> Callable[[bytes], bytes]:
    def mutate(raw: bytes) -> bytes:
        needle = f'"{key}": '.encode()
        at = raw.index(needle)
        value_end = raw.index(b",", at)
        return raw[:at] + raw[at:value_end] + b", " + raw[at:]
    mutate.__name__ = f"repeat {key}"
    return mutate


STUDY_INVALID = [
    sub("seeds = 1", "seeds = 1000000000"), sub("seeds = 1", "seeds = 0"), sub("seeds = 1", "seeds = -3"),
    sub("concurrency = 3", "concurrency = 0"), sub("concurrency = 3", "concurrency = 99999"),
    sub('name = "valid"', 'name = ""'), sub("seeds = 1", "seeds = 1\nharnesses = []"),
    sub("seeds = 1", 'seeds = 1\nharnesses = ["H99"]'), sub("seeds = 1", "seeds = 1\narms = []"),
    sub("seeds = 1", 'seeds = 1\narms = ["X"]'), sub("sensitivity = 0.8", "sensitivity = nan"),
    sub("sensitivity = 0.8", "sensitivity = 1e308"), sub("sensitivity = 0.8", "sensitivity = -inf"),
    sub("sensitivity = 0.8", "sensitivty = 0.8"), sub("latency_s = 0.0", "latency_s = 1e9"),
    sub("max_model_calls = 24", "max_model_calls = 0"), sub("max_tool_calls = 40", "max_tool_calls = 10000000000"),
    sub('protocol = "sim"', 'protocol = "nope"'), sub("seeds = 1", "seeds = 1\nunknown_key = 1"),
    sub("seeds = 1", "seeds = 1.5"), sub("seeds = 1", 'seeds = "2"'), bad_byte, deep_toml,
    sub('model = "sim-agent-v1"', 'model = "sim-agent-v1"\nretry = { max_connections = 0 }'),
    sub('model = "sim-agent-v1"', 'model = "sim-agent-v1"\nretry = { max_attempts = "3" }'),
    sub('model = "sim-agent-v1"', 'model = "sim-agent-v1"\nprice = { input = inf, output = 1.0 }'),
    sub("seeds = 1", "seeds = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]"
                     "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"), cut_json,
]
EVALUATOR_INVALID = [
    sub("concurrency = 8", "concurrency = 0"), sub("concurrency = 8", "concurrency = -1"),
    sub("max_tokens = 16384", "max_tokens = -1"), sub("max_tokens = 16384", "max_tokens = 0"),
    sub("max_tokens = 16384", "max_tokens = 100000000000"),
    sub('evaluator_id = "sim-lexical-v1"', 'evaluator_id = ""'),
    sub('evaluator_id = "sim-lexical-v1"', 'evaluator_id = "../up"'),
    sub('model = "sim-evaluator-v1"', 'model = "sim-evaluator-v1"\noptions = { order_bais = true }'),
    sub('model = "sim-evaluator-v1"', 'model = "sim-evaluator-v1"\noptions = { order_bias = "yes" }'),
    sub("document_items.v1.schema.json", "document_packet.v1.md"),
    sub("document_items.v1.schema.json", "missing.schema.json"),
    sub("concurrency = 8", "concurrency = 8\nextra = 1"), bad_byte, deep_toml, cut_json,
    sub("[schemas]", "[schemas]\n[schemas]"),
]
CARD_INVALID = [
    bad_byte, deep_json, cut_json, repeat_key("profile"), repeat_key("card_id"),
    sub("is 15,000 yuan", "is 6,000 yuan"), sub("I am 34", "I have 6,000 yuan and am 34"),
    sub("I am 34", "We can spend 15k, I am 34"), sub('"card_id"', '"card_idd"'), sub("{profile}", "{profil}"),
    sub('"status"', '"statusx"'), sub('"template": "', '"template": "{unknown} '), empty,
    sub('"factor": "budget_cap"', '"factor": "budget"'),
]
TRAJECTORY_INVALID = [
    bad_byte, deep_line, cut_line, empty, repeat_first_line, repeat_key("budget"),
    sub('"budget": 2', '"budget": NaN'), sub('"budget": 2', '"budget": -1'), sub('"chosen": "d0"', '"chosen": "dx"'),
    sub("[0.5, 0.25, 0.25]", "[0.5, 0.25, 0.3]"), sub("[0.5, 0.25, 0.25]", "[0.5, 0.5]"),
    sub('"ranking": "pro"', '"ranking": "sideways"'), sub('"stop_prob": 0.0', '"stop_prob": 2.0'),
    sub('"task_id": "q1", ', ""), sub('"y": [1.0, -1.0, 0.0]', '"y": [1.0, -1.0, Infinity]'),
]
CORPUS_INVALID = [
    bad_byte, deep_line, cut_line, empty, repeat_first_line, repeat_key("title"),
    sub('"id": "d001"', '"id": ""'), sub('"id": "d001", ', ""), sub('"id": "d001"', '"id": 1'),
    sub('"id": "d002"', '"id": "d001"'), sub('{"id": "d001"', '[{"id": "d001"'),
]

KINDS = [
    Kind("card", ".json", _card_valid, _load_card, (), CARD_INVALID),
    Kind("study", ".toml", _study_valid, _load_study, (StudyError, CardError), STUDY_INVALID),
    Kind("evaluator", ".toml", _evaluator_valid, _load_evaluator, (EvaluatorError,), EVALUATOR_INVALID),
    Kind("trajectories", ".jsonl", _trajectories_valid, _load_trajectories, (TrajectoryError,), TRAJECTORY_INVALID),
    Kind("corpus", ".jsonl", _corpus_valid, _load_corpus, (ValueError,), CORPUS_INVALID),
]

NOISE = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"=", b"\n", b"0", b"-1", b"\xff", b"\x00", b"nan", b"\\u",
         b"1e999", b"\"\"", b"#"]


def random_mutation(raw: bytes, rng: random.Random) -> bytes:
    """One to three random edits: replace, insert, delete or duplicate a span."""
    data = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        span = rng.randint(1, 40)
        op = rng.choice(("replace", "insert", "delete", "duplicate"))
        if op == "replace":
            data[at:at + 1] = rng.choice(NOISE)
        elif op == "insert":
            data[at:at] = rng.choice(NOISE) * rng.randint(1, 3)
        elif op == "delete":
            del data[at:at + span]
        else:
            data[at:at] = data[at:at + span]
    return bytes(data)


def _answer(kind: Kind, path: Path) -> bool:
    """Whether the loader accepted the file; a clean refusal is False; a hang or other exception fails."""
    try:
        with deadline(PER_CASE_S):
            return kind.load(path)
    except kind.errors:
        return False


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_invalid_by_construction_is_refused_and_random_mutations_never_crash_or_hang(kind, tmp_path):
    raw = kind.valid(tmp_path)
    path = tmp_path / f"fuzzed{kind.suffix}"
    path.write_bytes(raw)
    assert _answer(kind, path), f"the valid {kind.name} file is refused"
    accepted = [m.__name__ for m in kind.invalid if (path.write_bytes(m(raw)), _answer(kind, path))[1]]
    assert not accepted, f"{kind.name}: accepted although invalid by construction: {accepted}"
    rng = random.Random(f"{SEED}:{kind.name}")
    for _ in range(RANDOM_PER_KIND):
        path.write_bytes(random_mutation(raw, rng))
        _answer(kind, path)  # accepted or cleanly refused; anything else fails the test


def test_the_fuzz_covers_300_files():
    assert sum(RANDOM_PER_KIND + len(k.invalid) for k in KINDS) >= 300
