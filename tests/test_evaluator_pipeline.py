"""The evaluator on the demo archive: blinding, mirroring, allowed states, isolation between
evaluators, READ_FAILED without repair, idempotent re-reads, index tables and review sheets."""

from __future__ import annotations

import asyncio
import json
import re
import shutil

import duckdb
import pytest

from draligned.archive import Archive
from draligned.archive.store import ArchiveError
from draligned.cards import Card
from draligned.cli import main
from draligned.evaluator.aggregate import STATES
from draligned.evaluator.agreement import between_reads
from draligned.evaluator.config import Evaluator, EvaluatorError, load_evaluator
from draligned.evaluator.packets import MAX_REQUESTS, leak_findings, request_units
from draligned.evaluator.reading import collect_packets, read_archive, template_conflicts
from draligned.evaluator.sim import SimEvaluator, answer
from draligned.evaluator.states import state_rows
from draligned.evaluator.storage import ReadStore
from draligned.models.base import ModelAPI
from draligned.records import Message, ModelReply, ToolCallEvent, ToolSpec
from tests.conftest import DemoRun, file_stamps
from tests.study_helpers import REPO

SIM = REPO / "evaluators" / "sim.toml"
SIM_ID = "sim-lexical-v1"


@pytest.fixture(scope="module")
def demo(demo_run: DemoRun, tmp_path_factory) -> tuple[Archive, str]:
    """The demo run end to end (agent + SIMULATOR evaluator), with its printed output: this module's
    own copy, since its tests add reads by other evaluators and review answers (files of their own: the
    copy's files are links to the session's, never written into)."""
    assert demo_run.code == 0
    archive = demo_run.linked_copy(tmp_path_factory.mktemp("evaluator") / "archive")
    return Archive(archive), demo_run.stdout


@pytest.fixture(scope="module")
def few_runs(demo_run: DemoRun, tmp_path_factory) -> Archive:
    """The demo archive with a quarter of its runs (one seed of one model: every card, arm and harness),
    for the tests that read it with an evaluator of their own and check each of its reads."""
    archive = Archive(demo_run.linked_copy(tmp_path_factory.mktemp("few-runs") / "archive"))
    first = min((r.slot.seed, r.slot.model) for r in archive.records())
    for record in archive.records():
        if (record.slot.seed, record.slot.model) != first:
            for name in (f"{record.run_id}.json", f"{record.run_id}.started.json"):
                (archive.runs_dir / name).unlink(missing_ok=True)
    assert {r.slot.harness for r in archive.records()} == {"H00", "H-W", "H-D"}
    return archive


def _evaluator(evaluator_id: str) -> Evaluator:
    ev = load_evaluator(SIM)
    return ev.model_copy(update={"spec": ev.spec.model_copy(update={"evaluator_id": evaluator_id})})


class Counting(ModelAPI):
    """Wraps the sim evaluator and counts calls; ``mangle`` rewrites the response text, ``finish``
    replaces the finish reason."""

    def __init__(self, mangle=None, finish: str | None = None) -> None:
        super().__init__(load_evaluator(SIM).declaration())
        self.calls = 0
        self.mangle = mangle
        self.finish = finish

    async def generate(self, messages: list[Message], tools: list[ToolSpec], seed: int) -> ModelReply:
        self.calls += 1
        reply = await SimEvaluator(self.declaration).generate(messages, tools, seed)
        if self.finish is not None:
            reply = reply.model_copy(update={"finish_reason": self.finish})
        if self.mangle is None:
            return reply
        text = self.mangle(reply.text)
        return reply.model_copy(update={"text": text, "raw_response": json.dumps({"content": text})})


def test_demo_prints_the_final_pair_matrix(demo):
    _, out = demo
    assert "final states" in out and "OWN" in out


def test_every_packet_is_blind_to_profile_message_ids_and_condition(demo):
    archive, _ = demo
    records = {r.run_id: r for r in archive.records()}
    manifests = ReadStore(archive, SIM_ID).manifests()
    assert manifests and not any(m.blocked for m in manifests)
    all_ids = set(records) | {r.slot_id for r in records.values()}
    for m in manifests:
        prompt = archive.get_text(m.prompt_blob)
        record = records[m.run_id]
        card = Card.model_validate_json(archive.get_text(record.slot.card_sha256))
        assert card.profile not in prompt
        assert archive.get_text(record.user_message_blob) not in prompt
        assert not any(i in prompt for i in all_ids)
        assert record.slot.model not in prompt and record.requested_model not in prompt
        assert not re.search(r"\b(arm|cell|condition)\s*[:=]?\s*(P|Q|PP|PQ|QP|QQ)\b|[PQ]_(SIDE|LEAN)", prompt)
        assert "Tool return" not in prompt and "Snippet:" not in prompt  # no tool returns


def test_read_2_orientation_is_the_swap_of_read_1(demo):
    archive, _ = demo
    units: dict[tuple, dict[int, object]] = {}
    for m in ReadStore(archive, SIM_ID).manifests():
        units.setdefault((m.run_id, m.document, m.chunk), {})[m.read] = m
    assert units and all(set(u) == {1, 2} for u in units.values())
    for u in units.values():
        assert u[2].alpha_is_p is not u[1].alpha_is_p and u[1].content_sha256 == u[2].content_sha256
    first = [u[1].alpha_is_p for u in units.values()]
    assert 0.2 < sum(first) / len(first) < 0.8  # by hash: about half put P first


def test_states_use_only_allowed_values(demo, capsys):
    archive, _ = demo
    capsys.readouterr()
    assert main(["states", str(archive.root), "--evaluator", SIM_ID, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["phase"] for r in rows} == {"requests", "draft", "final"}
    assert all(r["state"] in STATES and r["reason"] for r in rows)
    assert {r["state"] for r in rows if r["phase"] != "requests"} <= {
        "OWN", "OTHER", "BOTH", "NONE", "UNKNOWN", "NO_DOCUMENT", "MISSING"}
    two_factor = [r for r in rows if r["card_id"] == "car_insurance_2f_en" and r["document"] == "final"]
    assert {r["axis_id"] for r in two_factor} == {"driving_pattern", "spending"}  # per axis
    assert len(rows) == len({(r["run_id"], r["document"], r["axis_id"]) for r in rows})


def test_second_evaluator_leaves_first_and_runs_byte_identical(few_runs):
    archive = few_runs
    before = ReadStore(archive, SIM_ID).files()
    runs = {p.name: p.read_bytes() for p in archive.runs_dir.iterdir()}
    summary = asyncio.run(read_archive(archive, _evaluator("sim-second"), ["final"]))
    assert summary.read_ok > 0 and not summary.model_errors
    assert ReadStore(archive, SIM_ID).files() == before
    assert {p.name: p.read_bytes() for p in archive.runs_dir.iterdir()} == runs
    assert main(["agreement", str(archive.root), "--evaluators", f"{SIM_ID},sim-second"]) == 0


def test_mirrored_reads_turn_a_position_bias_into_unknown(few_runs):
    """An evaluator that calls two-sided main advice for ALPHA disagrees with itself across reads."""
    archive = few_runs
    ev = _evaluator("sim-order-bias")
    model = ev.spec.model.model_copy(update={"options": {"order_bias": True}})
    ev = ev.model_copy(update={"spec": ev.spec.model_copy(update={"model": model})})
    asyncio.run(read_archive(archive, ev, ["final"]))
    biased = {(r.run_id, r.axis_id): r.decision for r in state_rows(archive, "sim-order-bias")}
    plain = {(r.run_id, r.axis_id): r.decision for r in state_rows(archive, SIM_ID) if r.document == "final"}
    both = [k for k, d in plain.items() if d.state == "BOTH"]
    assert both and all((biased[k].state, biased[k].reason) == ("UNKNOWN", "READS_DISAGREE") for k in both)
    final = next(a for a in between_reads(ReadStore(archive, "sim-order-bias")) if a.group == "final")
    assert final.n > 0 and final.exact < 1.0
    plain_final = next(a for a in between_reads(ReadStore(archive, SIM_ID)) if a.group == "final")
    assert plain_final.exact == 1.0


def test_reread_is_idempotent_and_makes_no_model_call(demo_run: DemoRun, capsys):
    """Reading the demo's archive again (in place: the session's) calls no model and writes no file, and
    ``draligned read`` again reports nothing new (its mark answers)."""
    archive = Archive(demo_run.out / "archive")
    before = file_stamps(archive.root)
    model = Counting()
    summary = asyncio.run(read_archive(archive, load_evaluator(SIM), model=model))
    assert model.calls == 0 and summary.already_read == summary.packets > 0
    capsys.readouterr()
    assert main(["read", str(archive.root), "--evaluator", str(SIM)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["read_ok"] == again["read_failed"] == again["blocked"] == 0 and again["already_read"] > 0
    assert file_stamps(archive.root) == before


def test_unknown_paragraph_id_is_read_failed_with_raw_kept(few_runs):
    archive = few_runs
    model = Counting(mangle=lambda text: text.replace('"p0', '"p9'))
    summary = asyncio.run(read_archive(archive, _evaluator("sim-broken"), ["final"], model=model))
    assert summary.read_failed > 0 and summary.read_ok == 0
    reads = ReadStore(archive, "sim-broken").reads()
    failed = [r for r in reads.values() if r.status == "READ_FAILED"]
    assert failed and all("unknown paragraph id" in r.error and not r.items for r in failed)
    assert '"p9' in archive.get_text(failed[0].raw_response_blob)
    states = {r.decision.state for r in state_rows(archive, "sim-broken")}
    assert "MISSING" in states and "NONE" not in states
    again = Counting()
    asyncio.run(read_archive(archive, _evaluator("sim-broken"), ["final"], model=again))
    assert again.calls == 0  # a failed read is never retried: no choosing between attempts


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_a_reply_that_parses_but_did_not_finish_is_read_failed_with_raw_kept(few_runs, finish):
    """A reply cut at the output cap can still be valid JSON (the cut fell after a closing brace)."""
    archive = few_runs
    eid = f"sim-cut-{finish}"
    summary = asyncio.run(read_archive(archive, _evaluator(eid), ["final"], model=Counting(finish=finish)))
    assert summary.read_failed > 0 and summary.read_ok == 0
    reads = list(ReadStore(archive, eid).reads().values())
    assert reads and all(r.status == "READ_FAILED" and not r.items and r.finish_reason == finish for r in reads)
    reason = "truncated" if finish == "length" else "incomplete"
    assert all(r.error.startswith(reason) for r in reads)
    assert '"items"' in archive.get_text(reads[0].text_blob)  # the parseable text is kept, not read


def test_a_reply_with_a_repeated_key_is_malformed(few_runs):
    archive = few_runs
    model = Counting(mangle=lambda text: text.replace('{"items"', '{"items": [], "items"', 1))
    summary = asyncio.run(read_archive(archive, _evaluator("sim-dup-key"), ["final"], model=model))
    assert summary.read_failed > 0 and summary.read_ok == 0
    reads = list(ReadStore(archive, "sim-dup-key").reads().values())
    assert all(r.status == "READ_FAILED" and "duplicate keys ['items']" in r.error for r in reads)


def test_same_evaluator_id_with_another_configuration_is_refused(few_runs):
    archive = few_runs
    ev = load_evaluator(SIM)
    changed = ev.model_copy(update={"spec": ev.spec.model_copy(update={"max_tokens": 99})})
    with pytest.raises(Exception, match="different configuration"):
        asyncio.run(read_archive(archive, changed))


def test_an_edited_template_under_a_used_name_is_refused(demo, tmp_path):
    """Templates are versioned by file name: a v1 file edited after the archive used it is refused for
    any evaluator id (an unchanged copy is fine); nothing is written for the refused evaluator."""
    archive, _ = demo
    prompts = tmp_path / "evaluator_prompts"
    shutil.copytree(REPO / "evaluator_prompts", prompts)
    toml = SIM.read_text().replace("../evaluator_prompts", str(prompts))
    same = tmp_path / "same.toml"
    same.write_text(toml.replace('evaluator_id = "sim-lexical-v1"', 'evaluator_id = "sim-copy"'))
    assert template_conflicts(archive, load_evaluator(same)) == []
    doc = prompts / "document_packet.v1.md"
    doc.write_text(doc.read_text() + "\nJudge strictly.\n")
    edited = tmp_path / "edited.toml"
    edited.write_text(toml.replace('evaluator_id = "sim-lexical-v1"', 'evaluator_id = "sim-edited"'))
    with pytest.raises(EvaluatorError, match="document_packet.v1.md"):
        asyncio.run(read_archive(archive, load_evaluator(edited), ["final"]))
    assert not (archive.root / "reads" / "sim-edited").exists()


def test_read_verifies_blobs_before_anything_is_written(demo_run: DemoRun, tmp_path):
    copy = Archive(demo_run.linked_copy(tmp_path / "archive"))
    record = copy.records()[0]
    tampered = copy.blob_path(record.final_blob)
    tampered.unlink()  # a file of its own: the session's stays whole
    tampered.write_text("tampered")
    model = Counting()
    with pytest.raises(ArchiveError, match="altered"):
        asyncio.run(read_archive(copy, _evaluator("sim-fresh"), model=model))
    assert model.calls == 0 and not (copy.root / "reads" / "sim-fresh").exists()


def test_a_read_whose_packet_file_is_there_with_other_bytes_stops_before_any_model_call(demo_run: DemoRun,
                                                                                         tmp_path):
    """The packets go to the archive's writer in batches; one refused (a file of its name with other bytes,
    as a damaged packet or another read of the same evaluator leaves) stops the read when it waits for its
    packets to be durable: no model call is paid for and no read is written."""
    copy = Archive(demo_run.linked_copy(tmp_path / "archive"))
    evaluator = _evaluator("sim-fresh")
    packet = collect_packets(copy, evaluator, ["final"])[0]
    taken = ReadStore(copy, "sim-fresh").packet_path(packet.manifest)
    taken.parent.mkdir(parents=True)
    taken.write_text("{}")
    model = Counting()
    with pytest.raises(ArchiveError, match="refusing to overwrite"):
        asyncio.run(read_archive(copy, evaluator, ["final"], model=model))
    assert model.calls == 0 and not (copy.root / "reads" / "sim-fresh" / "reads").exists()
    assert taken.read_text() == "{}"


def test_index_has_evaluator_tables(demo):
    archive, _ = demo
    con = duckdb.connect(str(archive.root / "index.duckdb"), read_only=True)
    for table in ("packets", "reads", "items", "labels", "states"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE evaluator_id = ?", [SIM_ID]).fetchone()[0] > 0


def test_request_packets_are_split_at_32_and_12(demo):
    archive, _ = demo
    record = next(r for r in archive.records() if r.slot.card_id == "car_insurance_2f_en")
    reqs = [e for e in record.events if isinstance(e, ToolCallEvent) and e.request_text]
    many = record.model_copy(update={"events": [e.model_copy(update={"event_id": f"x{i}"})
                                                for i in range(8) for e in reqs]})
    for factors in (1, 2):
        units = request_units(many, factors)
        assert all(len(u.texts) <= MAX_REQUESTS[factors] for u in units)
        assert [s for u in units for s in u.source_events] == [e.event_id for e in many.events
                                                              if isinstance(e, ToolCallEvent) and e.request_text]


def test_a_packet_that_would_leak_is_blocked(few_runs):
    archive = few_runs
    ev = load_evaluator(SIM)
    packet = collect_packets(archive, ev, ["final"])[0]
    assert leak_findings(packet.prompt, {"profile": "an unrelated sentence"}) == []
    assert leak_findings(packet.prompt + "\nthe  PROFILE text", {"profile": "the profile text"}) == [
        "contains the profile"]
    assert leak_findings(packet.prompt + "\nassigned arm: Q", {}) != []
    assert leak_findings("the echo3 and o3-mini notes", {"model name": "o3"}) == []  # ids match as tokens
    assert leak_findings("written by O3.", {"model name": "o3"}) == ["contains the model name"]
    assert leak_findings("我今年31岁，住在杭州。", {"profile": "我今年31岁，"}) == ["contains the profile"]


def test_sim_evaluator_answers_in_alpha_beta(few_runs):
    archive = few_runs
    packet = next(p for p in collect_packets(archive, load_evaluator(SIM), ["final"]))
    items = answer(packet.prompt)["items"]
    assert items and {i["side"] for i in items} <= {"ALPHA_SIDE", "BETA_SIDE", "BOTH", "NEITHER"}


def test_review_export_is_blind_and_import_reports_agreement(demo, tmp_path, capsys):
    archive, _ = demo
    sheet = tmp_path / "sheet.jsonl"
    assert main(["review", "export", str(archive.root), "--evaluator", SIM_ID, "--out", str(sheet),
                 "--limit", "6"]) == 0
    rows = [json.loads(line) for line in sheet.read_text().splitlines()]
    assert len(rows) == 6
    text = sheet.read_text()
    assert not any(r.run_id in text or r.slot_id in text for r in archive.records())
    assert set(rows[0]) == {"item_id", "task", "factor", "scope", "ALPHA", "BETA", "rubric", "document",
                            "question", "reviewer", "answer"}  # no run, arm, orientation or instrument label
    assert not re.search(r"\b(OWN|OTHER|P_SIDE|Q_SIDE|P_LEAN|Q_LEAN)\b", text)
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"item_id": r["item_id"], "reviewer": who, "answer": ans}) + "\n"
                               for r in rows for who, ans in (("R1", "ALPHA_SIDE"), ("R2", "ALPHA_SIDE"))))
    capsys.readouterr()
    assert main(["review", "import", str(archive.root), "--evaluator", SIM_ID, str(answers)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["with_instrument"]) == {"R1", "R2"}
    assert report["between_reviewers"]["exact"] == 1.0
    assert archive.get_text(report["answers_blobs"][0]) == answers.read_text()


def test_archive_verify_covers_evaluator_files(demo_run: DemoRun, tmp_path):
    """A damaged read record, a deleted raw response, a damaged review key or a deleted answers file is
    named by `archive verify`."""
    from draligned.indexing import verify

    assert demo_run.code == 0
    archive = Archive(demo_run.linked_copy(tmp_path / "archive"))
    sheet, answers = tmp_path / "sheet.jsonl", tmp_path / "answers.jsonl"
    assert main(["review", "export", str(archive.root), "--evaluator", SIM_ID, "--out", str(sheet),
                 "--limit", "2"]) == 0
    answers.write_text("".join(json.dumps({"item_id": json.loads(line)["item_id"], "reviewer": "R1",
                                           "answer": "BOTH"}) + "\n" for line in sheet.read_text().splitlines()))
    assert main(["review", "import", str(archive.root), "--evaluator", SIM_ID, str(answers)]) == 0
    assert verify(archive) == []
    key = next((archive.root / "reviews").glob("*/*.key.json"))
    key.write_text(key.read_text()[:-5])
    answers_blob = archive.blob_path(archive.put_blob(answers.read_text()))
    answers_blob.unlink()
    damaged, other = sorted((archive.root / "reads").glob("*/reads/*.json"))[:2]
    text = damaged.read_text()
    damaged.unlink()  # a file of its own: the session's stays whole
    damaged.write_text(text[:-20])
    raw = json.loads(other.read_text())["raw_response_blob"]
    archive.blob_path(raw).unlink()
    problems = verify(archive)
    assert any(str(damaged) in p and "unreadable ReadRecord" in p for p in problems)
    assert any(str(archive.blob_path(raw)) in p and str(other) in p for p in problems)
    assert any(str(key) in p and "unreadable review key" in p for p in problems)
    assert any(str(answers_blob) in p and "missing answers blob" in p for p in problems)
