"""The executor registry and protocol, the typed contract models and the one count behind the budget."""

from __future__ import annotations

import json

import pytest

from draligned.executors import EXECUTORS, Budget, Executor, Ledger, UnknownHarness, executor_for
from draligned.harness import HARNESS_DIR, Contract, ContractError, WorkspaceLimits, load_contract
from draligned.records import Counters, RunRecord, Usage
from draligned.sandbox import SandboxLimits


def test_every_contract_has_an_executor_that_declares_the_protocol():
    assert {p.stem for p in HARNESS_DIR.glob("*.json")} == set(EXECUTORS)
    for harness, cls in EXECUTORS.items():
        assert Executor in cls.__mro__ and executor_for(harness) is cls
        assert cls.needs_sandbox is isinstance(load_contract(harness).contract.limits, WorkspaceLimits)


def test_an_unknown_harness_names_the_known_ones():
    with pytest.raises(UnknownHarness, match=r"no executor for harness 'H01' \(known: H-D, H-W, H00\)"):
        executor_for("H01")


@pytest.mark.parametrize("harness", sorted(EXECUTORS))
def test_contract_models_keep_every_field_of_the_file(harness):
    lc = load_contract(harness)
    assert lc.contract.model_dump(mode="json", exclude_unset=True) == json.loads(lc.raw)
    assert lc.contract.role("executor").tools == [t.name for t in lc.contract.tools if t.name != "delegate_batch"] + (
        ["delegate_batch"] if harness == "H-D" else [])


@pytest.mark.parametrize("where", ["limits", "roles"])
def test_contract_refuses_unknown_keys(where):
    data = json.loads(load_contract("H-W").raw)
    if where == "limits":
        data["limits"]["shell_gpus"] = 1
    else:
        data["roles"][0]["memory"] = "on"
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Contract.model_validate(data)


def test_sandbox_limits_come_from_the_typed_contract_limits():
    limits = load_contract("H-W").contract.workspace_limits()
    assert SandboxLimits.from_contract(limits) == SandboxLimits(
        timeout_s=limits.shell_timeout_s, output_chars=limits.shell_output_chars, cpu_s=limits.shell_cpu_s,
        memory_mb=limits.shell_memory_mb, file_mb=limits.shell_file_mb, processes=limits.shell_processes,
        open_files=limits.shell_open_files)


def test_the_ledger_reads_the_run_records_counters():
    record = RunRecord.model_construct(counters=Counters())
    ledger = Ledger(Budget(max_model_calls=2, max_tool_calls=1, max_tokens=100), record)
    assert ledger.can_call_model() and ledger.can_call_tool()
    record.counters.usage = Usage(input_tokens=50, output_tokens=40, reasoning_tokens=500, cached_tokens=500)
    assert ledger.can_call_model()  # input plus output tokens count, as before; reasoning and cached are inside them
    record.counters.usage = Usage(input_tokens=60, output_tokens=40)
    assert ledger.model_budget_spent() == "token budget spent"
    record.counters.model_calls, record.counters.tool_calls = 2, 1
    assert ledger.model_budget_spent() == "model-call budget spent" and not ledger.can_call_tool()


def test_a_contract_whose_tool_schema_is_not_a_json_schema_is_refused_at_load(tmp_path):
    """The tool schemas are checked against their metaschema once, when the contract loads, naming the field."""
    data = json.loads((HARNESS_DIR / "H00.json").read_text())
    data["tools"][1]["parameters"]["type"] = "objekt"
    (tmp_path / "H00.json").write_text(json.dumps(data))
    with pytest.raises(ContractError, match=r"H00.json: field tools\[1\].parameters: not a JSON Schema: 'objekt'"):
        load_contract("H00", tmp_path)
