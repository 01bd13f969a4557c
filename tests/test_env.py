"""ToolUseEnv behind the Gymnasium API: spaces, seeding, turns, eval fidelity, robustness, concurrency."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from seal_envs.env import ToolUseEnv
from seal_envs.interface import GUIDELINES, EvolutionConfig, InterfaceState
from seal_envs.parsing import format_tool_call
from seal_envs.task import ToolCall

from conftest import LEDGER

TASK = "deposit-then-ask"


def replay_ground_truth(env, task_id):
    """Play the task's ground truth; returns (all observations, final reward, final info)."""
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    seen = [obs]
    for turn in env.unwrapped._task_by_id(task_id).turns:
        actions = [format_tool_call(c) for c in turn.ground_truth] + [" ".join(turn.required_response) or "Done."]
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            seen.append(obs)
    assert terminated and not truncated
    return seen, reward, info


def test_gym_make_without_importing_seal_envs():
    env = gym.make("seal/ToolUse-v0", domain=LEDGER, sandbox="inprocess")
    obs, info = env.reset(seed=0)
    assert obs[-1]["role"] == "user" and info["tools"]
    env.close()


def test_check_env_passes(backend):
    env = ToolUseEnv(domain=LEDGER, sandbox=backend)
    check_env(env, skip_render_check=True)
    env.close()


def test_seeded_reset_is_reproducible_and_task_id_selects():
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess")
    ids = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert ids == [env.reset(seed=s)[1]["task_id"] for s in range(8)] and len(set(ids)) == 2
    assert env.reset(options={"task_id": "withheld-transfer"})[1]["task_id"] == "withheld-transfer"
    with pytest.raises(ValueError, match="unknown task_id 'nope'"):
        env.reset(options={"task_id": "nope"})


def test_ground_truth_scores_one_and_every_turn_passes(backend):
    env = ToolUseEnv(domain=LEDGER, sandbox=backend)
    for task in env.tasks:
        _, reward, info = replay_ground_truth(env, task.id)
        assert reward == 1.0 and set(info["labels"]) <= {"pass", "correct_abstention"}, info
    env.close()


def test_turn_flow_and_tools_added_by_a_turn():
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess")
    obs, info = env.reset(options={"task_id": "withheld-transfer"})
    assert [t["function"]["name"] for t in info["tools"]] == ["get_balance", "deposit", "set_mode"]
    obs, reward, terminated, _, info = env.step("I can't do that with these tools.")
    assert info["turn_ended"] and info["label"] == "correct_abstention" and not terminated and reward == 0
    assert obs == ({"role": "user", "content": "You can transfer now; please do it."},)
    assert "transfer" in [t["function"]["name"] for t in info["tools"]]


def test_step_cap_force_quits_the_episode():
    """BFCL's rule: a turn that reaches the cap ends the episode, failed, unless it was the last turn."""
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess", max_steps_per_turn=3)
    env.reset(options={"task_id": TASK})
    probe = format_tool_call(ToolCall("get_balance", {"account": "bob"}))
    steps = [env.step(probe) for _ in range(3)]
    infos = [s[4] for s in steps]
    assert [i["turn_ended"] for i in infos] == [False, False, True] and [s[2] for s in steps] == [False, False, True]
    assert infos[-1]["diagnosis"]["evidence"]["step_cap_hit"] and infos[-1]["turn"] == 0 and infos[-1]["force_quit"]
    assert steps[-1][1] == 0.0 and infos[-1]["labels"] == [infos[-1]["label"], "not_reached"]  # the rest padded


@pytest.mark.parametrize("action", [
    "<tool_call>{'name': </tool_call>", "<tool_call></tool_call>" * 50, "\x00" * 10_000, "<tool_call>" + "[" * 100_000,
    '<tool_call>{"name": "deposit", "arguments": {"account": {"$ref": "#"}, "amount": 1e400}}</tool_call>',
], ids=["truncated", "empty-blocks", "nul-bytes", "deep-nesting", "hostile-arguments"])
def test_malformed_actions_are_diagnosed_not_raised(action):
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess")
    env.reset(options={"task_id": TASK})
    obs, _, _, _, info = env.step(action)
    assert all(m["role"] in ("tool", "user") for m in obs)
    if not info["turn_ended"]:
        *_, info = env.step("Done.")
    assert info["label"] in ("invalid_tool_call", "argument_mismatch", "missing_tool_call")


def test_tool_exception_becomes_an_error_observation(backend):
    env = ToolUseEnv(domain=LEDGER, sandbox=backend)
    env.reset(options={"task_id": TASK})
    obs, *_ = env.step(format_tool_call(ToolCall("transfer", {"source": "bob", "target": "alice", "amount": 99})))
    assert json.loads(obs[0]["content"]) == {"error": "ValueError: insufficient funds"}
    env.close()


def test_step_after_the_end_is_an_error():
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess")
    replay_ground_truth(env, TASK)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("again")


def test_eval_observations_identical_after_any_mutation():
    def eval_trace():
        env = gym.make("seal/ToolUse-v0", domain=LEDGER, sandbox="inprocess", mode="eval")
        obs, info = env.reset(seed=3, options={"task_id": TASK})
        trace = [obs, info["tools"]]
        for action in (format_tool_call(ToolCall("deposit", {"account": "alice"})), "Done.", "I don't know."):
            obs, _, _, _, info = env.step(action)
            trace += [obs, info["tools"]]
        return json.dumps(trace, sort_keys=True).encode()

    before = eval_trace()
    train = gym.make("seal/ToolUse-v0", domain=LEDGER, sandbox="inprocess", mode="train")
    for profile in ({"argument_mismatch": 9}, {"spurious_tool_call": 5, "state_mismatch": 5}, {"invalid_tool_call": 3}):
        train.unwrapped.mutate(profile)
    train.reset(seed=3)
    assert train.unwrapped.interface.version == 3
    assert eval_trace() == before
    with pytest.raises(RuntimeError, match="original interface"):
        gym.make("seal/ToolUse-v0", domain=LEDGER, sandbox="inprocess", mode="eval").unwrapped.mutate({"pass": 1})


def test_training_interface_shows_cues_from_the_next_reset():
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess",
                     interface=InterfaceState(config=EvolutionConfig(error_hints="on_failure")))
    env.reset(options={"task_id": TASK})
    state = env.mutate({"argument_mismatch": 8, "missing_tool_call": 4})
    assert state.schema_cues and state.error_hints and env.interface == state
    obs, info = env.reset(options={"task_id": TASK})
    assert obs[0]["role"] == "system" and "[required]" in json.dumps(info["tools"])
    obs, *_ = env.step(format_tool_call(ToolCall("deposit", {"account": "alice"})))
    assert "required argument 'amount' is missing" in obs[0]["content"]


def test_hints_never_reveal_ground_truth_values():
    env = ToolUseEnv(domain=LEDGER, sandbox="inprocess")
    env.mutate(InterfaceState(schema_cues=True, error_hints=True, guidelines=tuple(t.value for t in GUIDELINES)))
    env.reset(options={"task_id": TASK})
    wrong = [format_tool_call(ToolCall("deposit", {"account": "zoe", "amount": "lots"})),
             format_tool_call(ToolCall("deposit", {"amount": 1})), "<tool_call>nope</tool_call>",
             format_tool_call(ToolCall("get_balance", {"account": "zed"}))]
    text = ""
    for action in wrong:
        obs, *_ = env.step(action)
        text += json.dumps(obs)
    text += json.dumps(env.reset(options={"task_id": TASK})[0])
    for secret in ('"alice", "amount": 5', "15", '"amount": 5'):
        assert secret not in text


def test_a_malformed_call_is_answered_alike_with_and_without_hints():
    """The protocol decides how a malformed call is answered; the error-hint cue only adds text."""
    observations = []
    for interface in (None, InterfaceState(error_hints=True)):
        env = ToolUseEnv(domain=LEDGER, sandbox="inprocess", interface=interface)
        env.reset(options={"task_id": TASK})
        obs, _, _, _, info = env.step("<tool_call>nope</tool_call>")
        assert not info["turn_ended"] and obs[0]["role"] == "tool" and "ParseError" in obs[0]["content"]
        observations.append(obs[0]["content"])
        env.close()
    plain, hinted = observations
    assert "Hint" not in plain and hinted.startswith(plain) and "Hint (parse error)" in hinted


def test_many_envs_step_concurrently(backend):
    def episode(i):
        env = ToolUseEnv(domain=LEDGER, sandbox=backend)
        try:
            return replay_ground_truth(env, TASK)[1]
        finally:
            env.close()

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(episode, range(32))) == [1.0] * 32
