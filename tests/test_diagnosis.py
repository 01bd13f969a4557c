"""One test per label, each from a real executed trace through the env (not hand-built evidence)."""

from __future__ import annotations

import json

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.parsing import format_tool_call
from seal_envs.task import ToolCall

from conftest import LEDGER


def call(name, **arguments) -> str:
    return format_tool_call(ToolCall(name, arguments))


@pytest.fixture
def env(backend):
    env = ToolUseEnv(domain=LEDGER, sandbox=backend)
    yield env
    env.close()


def run_turn(env, task_id, *actions, earlier_turns=()):
    """Reset to ``task_id``, play ``earlier_turns`` (lists of actions) then ``actions``; return the last info."""
    env.reset(seed=0, options={"task_id": task_id})
    for turn in (*earlier_turns, actions):
        for action in turn:
            *_, info = env.step(action)
    assert info["turn_ended"]
    return info


DEPOSIT_OK = (call("deposit", account="alice", amount=5), "Done.")


@pytest.mark.parametrize("label, task_id, earlier, actions", [
    ("pass", "deposit-then-ask", (), DEPOSIT_OK),
    ("invalid_tool_call", "deposit-then-ask", (), ("<tool_call>{not json</tool_call>",)),  # no call: the turn ends
    ("invalid_tool_call", "deposit-then-ask", (), (call("withdraw", account="alice", amount=5), "Done.")),
    ("argument_mismatch", "deposit-then-ask", (), (call("deposit", account="alice", amount="5"), "Done.")),
    ("argument_mismatch", "deposit-then-ask", (), (call("deposit", account="alice"), "Done.")),
    ("state_mismatch", "deposit-then-ask", (), (call("set_mode", mode="fast"), "Done.")),
    ("instance_mismatch", "deposit-then-ask", (), (call("deposit", account="bob", amount=5), "Done.")),
    ("missing_tool_call", "deposit-then-ask", (), ("Sure, deposited.",)),
    ("missing_tool_call", "deposit-then-ask", (DEPOSIT_OK,), ("It is 15.",)),
    ("recovery_failure", "deposit-then-ask", (DEPOSIT_OK,), (call("get_balance", account="zed"), "It is 15.")),
    ("response_mismatch", "deposit-then-ask", (DEPOSIT_OK,), (call("get_balance", account="alice"), "No idea.")),
    ("pass", "deposit-then-ask", (DEPOSIT_OK,), (call("get_balance", account="alice"), "Alice has 15.")),
    ("empty_turn_model_response", "deposit-then-ask", (), ("",)),
    ("spurious_tool_call", "withheld-transfer", (), (call("deposit", account="bob", amount=3), "Done.")),
    ("spurious_tool_call", "withheld-transfer", (), (call("transfer", source="alice", target="bob", amount=3), "Done.")),
    ("correct_abstention", "withheld-transfer", (), ("I cannot move money with the tools I have.",)),
    ("pass", "withheld-transfer", (("I can't.",),), (call("transfer", source="alice", target="bob", amount=3), "Moved.")),
])
def test_label_from_executed_trace(env, label, task_id, earlier, actions):
    info = run_turn(env, task_id, *actions, earlier_turns=earlier)
    assert info["label"] == label, info["diagnosis"]
    assert info["diagnosis"]["label"] == label and info["diagnosis"]["reason"]


def test_recovered_error_still_passes(env):
    info = run_turn(env, "deposit-then-ask", call("deposit", account="alice", amount="5"),
                    call("deposit", account="alice", amount=5), "Done.")
    assert info["label"] == "pass"


def test_broken_initial_state_is_a_task_error_not_a_crash(backend):
    env = ToolUseEnv(domain=LEDGER, tasks=LEDGER / "broken_tasks.json", sandbox=backend)
    _, info = env.reset(seed=0)
    assert info["task_error"] and "cannot be executed" in info["error"]
    obs, reward, terminated, truncated, info = env.step("hello")
    assert terminated and reward == 0.0 and info["label"] == "task_error" and not info["infrastructure_error"]
    env.close()


def test_evidence_is_json_serialisable(env):
    info = run_turn(env, "deposit-then-ask", call("set_mode", mode="fast"), "Done.")
    evidence = json.loads(json.dumps(info["diagnosis"]))["evidence"]
    assert evidence["state_matches"] is False and "$.ledger_api:LedgerAPI.mode" in evidence["state_diff"]
