"""One test per label and tag, each from a real executed trace through the env (not hand-built evidence)."""

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


# label (ours), tag (the reference's rules), task, earlier turns, this turn's actions
CASES = [
    ("pass", "pass", "deposit-then-ask", (), DEPOSIT_OK),
    # no call decoded: the reference tags it empty_turn_model_response (rho 1.5), whatever the text
    ("invalid_tool_call", "empty_turn_model_response", "deposit-then-ask", (), ("<tool_call>{not json</tool_call>", "Ok.")),
    ("invalid_tool_call", "state_mismatch", "deposit-then-ask", (), (call("withdraw", account="alice", amount=5), "Done.")),
    ("argument_mismatch", "state_mismatch", "deposit-then-ask", (), (call("deposit", account="alice", amount="5"), "Done.")),
    ("argument_mismatch", "state_mismatch", "deposit-then-ask", (), (call("deposit", account="alice"), "Done.")),
    ("state_mismatch", "state_mismatch", "deposit-then-ask", (), (call("set_mode", mode="fast"), "Done.")),
    ("state_mismatch", "state_mismatch", "deposit-then-ask", (), (call("deposit", account="bob", amount=5), "Done.")),
    # the call ran on another backend class (AuditLog) than the ground truth's (LedgerAPI)
    ("instance_mismatch", "instance_mismatch", "deposit-then-ask", (), (call("add_note", text="deposit 5"), "Done.")),
    ("missing_tool_call", "empty_turn_model_response", "deposit-then-ask", (), ("Sure, deposited.",)),
    ("missing_tool_call", "empty_turn_model_response", "deposit-then-ask", (DEPOSIT_OK,), ("It is 15.",)),
    ("recovery_failure", "response_mismatch", "deposit-then-ask", (DEPOSIT_OK,),
     (call("get_balance", account="zed"), "It is 15.")),
    ("response_mismatch", "response_mismatch", "deposit-then-ask", (DEPOSIT_OK,),
     (call("get_balance", account="alice"), "No idea.")),
    # a failed call retried with success is recovered: the answer is what fails (mutation testing found no case)
    ("response_mismatch", "response_mismatch", "deposit-then-ask", (DEPOSIT_OK,),
     (call("get_balance", account="zed"), call("get_balance", account="alice"), "No idea.")),
    # a successful call before the failed one does not count as its recovery
    ("recovery_failure", "response_mismatch", "deposit-then-ask", (DEPOSIT_OK,),
     (call("get_balance", account="alice"), call("get_balance", account="zed"), "No idea.")),
    ("pass", "pass", "deposit-then-ask", (DEPOSIT_OK,), (call("get_balance", account="alice"), "Alice has 15.")),
    ("empty_turn_model_response", "empty_turn_model_response", "deposit-then-ask", (), ("",)),
    ("spurious_tool_call", "spurious_tool_call", "withheld-transfer", (), (call("deposit", account="bob", amount=3), "Done.")),
    ("spurious_tool_call", "spurious_tool_call", "withheld-transfer", (),
     (call("transfer", source="alice", target="bob", amount=3), "Done.")),
    # a malformed block on an abstention turn: an attempted call for us; the reference decodes nothing there
    ("spurious_tool_call", "correct_abstention", "withheld-transfer", (), ("<tool_call>{not json</tool_call>", "Ok.")),
    ("correct_abstention", "correct_abstention", "withheld-transfer", (), ("I cannot move money with the tools I have.",)),
    # an empty answer is no abstention: the turn fails and says why; the reference's tag counts no decoded call
    ("empty_turn_model_response", "correct_abstention", "withheld-transfer", (), ("",)),
    ("pass", "pass", "withheld-transfer", (("I can't.",),), (call("transfer", source="alice", target="bob", amount=3), "Moved.")),
]


@pytest.mark.parametrize("label, tag, task_id, earlier, actions", CASES)
def test_label_and_tag_from_executed_trace(env, label, tag, task_id, earlier, actions):
    info = run_turn(env, task_id, *actions, earlier_turns=earlier)
    assert (info["label"], info["tag"]) == (label, tag), info["diagnosis"]
    assert info["diagnosis"]["label"] == label and info["diagnosis"]["tag"] == tag and info["diagnosis"]["reason"]
    verdict_passed = info["verdicts"][-1] if "verdicts" in info else None
    if label in ("pass", "correct_abstention") and verdict_passed is not None:
        assert verdict_passed


def test_an_empty_answer_on_an_abstention_turn_fails_the_turn(env):
    env.reset(seed=0, options={"task_id": "withheld-transfer"})
    env.step("")
    env.step(call("transfer", source="alice", target="bob", amount=3))
    _, reward, terminated, _, info = env.step("Moved.")
    assert terminated and reward == 0.0 and info["verdicts"] == [False, True]
    assert info["labels"] == ["empty_turn_model_response", "pass"]


def test_argument_mismatch_names_the_argument_and_the_rule(env):
    info = run_turn(env, "deposit-then-ask", call("deposit", account="alice", amount="5"), "Done.")
    assert "'amount' has the wrong type" in info["diagnosis"]["reason"]


def test_a_step_cap_pads_the_turns_never_reached(backend):
    env = ToolUseEnv(domain=LEDGER, sandbox=backend, max_steps_per_turn=2)
    env.reset(seed=0, options={"task_id": "deposit-then-ask"})
    env.step(call("get_balance", account="alice"))
    _, reward, terminated, _, info = env.step(call("get_balance", account="alice"))
    env.close()
    assert terminated and reward == 0.0
    assert info["labels"] == ["state_mismatch", "not_reached"]
    assert info["tags"] == ["state_mismatch", "empty_turn_model_response"]  # the reference's padding


def test_truncate_judges_the_turn_in_progress_and_pads_the_rest(env):
    env.reset(seed=0, options={"task_id": "withheld-transfer"})
    env.step("I can't.")
    env.step(call("transfer", source="alice", target="bob", amount=3))  # turn 2 in progress, its call ran
    info = env.truncate("budget")
    assert info["truncated"] and info["labels"] == ["correct_abstention", "pass"] and info["verdicts"] == [True, True]
    env.reset(seed=0, options={"task_id": "withheld-transfer"})
    info = env.truncate("budget")
    assert info["labels"] == ["empty_turn_model_response", "not_reached"]
    assert info["tags"] == ["correct_abstention", "empty_turn_model_response"]


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


def test_a_turn_the_sandbox_failed_is_tagged_infrastructure_error():
    """The tag that keeps the turn out of the weights and profiles; no executed trace: the sandbox must fail."""
    from seal_envs.diagnosis import CallRecord, TurnEvidence, TurnVerdict, diagnose_turn
    from seal_envs.task import Turn

    turn = Turn("deposit 5", (ToolCall("deposit", {"account": "alice", "amount": 5}),))
    records = (CallRecord(0, "ok", ToolCall("deposit", {"account": "alice", "amount": 5})),
               CallRecord(1, "infrastructure_error", ToolCall("get_balance", {"account": "alice"})))
    diagnosis = diagnose_turn(TurnEvidence(0, turn, records, "Done.", TurnVerdict(True, True, True)))
    assert (diagnosis.label.value, diagnosis.tag.value) == ("infrastructure_error", "infrastructure_error")
