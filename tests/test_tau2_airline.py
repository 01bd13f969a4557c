"""tau2-bench airline as a bundled MCP domain (issue 22): tau2's own tools and data from the installed package,
the offline scripted user, and tau2's deterministic grading (final DB and communicated information)."""

from __future__ import annotations

import gymnasium as gym

from seal_envs.evaluation.policies import ReplayPolicy
from seal_envs.evaluation.runner import run_episode
from seal_envs.evaluation.tau2 import tau2_verdict
from seal_envs.sandbox import SandboxConfig
from seal_envs.spec import load_domain
from tool_specs.tau2_airline.splits import CONFIRMATION, READ_ONLY, tasks


def test_the_splits_are_taus_with_the_policy_in_the_system_prompt_and_the_scripted_user():
    train, test, every = tasks("train"), tasks("eval"), tasks("all")
    assert (len(train), len(test), len(every)) == (30, 20, 50)
    assert {t.id for t in train} | {t.id for t in test} == {t.id for t in every}
    task = next(t for t in every if t.id == "airline_7")
    assert "<policy>\n# Airline Agent Policy" in task.system_prompt
    assert task.turns[0].user.startswith(task.metadata["user_scenario"]["instructions"]["reason_for_call"].strip())
    assert task.turns[1].user == CONFIRMATION
    assert all(c.name in READ_ONLY for c in task.turns[0].ground_truth)  # reads before the user's confirmation
    assert task.turns[1].ground_truth[0].name == "update_reservation_flights"
    assert task.metadata["communicate_info"] == ["1628"] and task.turns[1].required_response == ()  # tau2 grades it
    domain = load_domain("tau2_airline")
    assert {t.name for t in domain.tools if not t.mutates_state} == READ_ONLY  # tau2's own tool types


def test_taus_grading_passes_the_ground_truth_and_fails_perturbations():
    task = next(t for t in tasks("all") if t.id == "airline_7")
    domain, config = load_domain("tau2_airline"), SandboxConfig(backend="inprocess")
    gold = [[[call] for call in turn.ground_truth] + [[]] for turn in task.turns]

    def grade(calls, final: str) -> dict:
        steps = [step for turn in calls for step in turn]
        messages = [{"role": "assistant", "content": "(a call)" if step else "Noted."} for step in steps[:-1]]
        return tau2_verdict(task, calls, [*messages, {"role": "assistant", "content": final}], domain, config)

    assert grade(gold, "The difference is 1,628 dollars.") == {"db": True, "communicate": True, "missing_info": [],
                                                               "reward": 1.0}
    assert grade(gold, "Done.")["missing_info"] == ["1628"]
    without_write = [gold[0], [[]]]
    assert grade(without_write, "1628")["db"] is False


def test_ground_truth_replay_scores_one_under_the_env_and_taus_grading(backend):
    # the server loads tau2's 3 MB database at each episode's start: on a loaded 2-core machine that can take
    # more than the default 10 s that bounds a container's reset
    config = SandboxConfig(backend=backend, call_timeout_s=40.0)
    env = gym.make("seal/ToolUse-v0", domain="tau2_airline", mode="eval", sandbox=config).unwrapped
    try:
        assert len(env.tasks) == 20  # mode="eval": the domain's eval split, as no tasks.json is beside it
        task = next(t for t in env.tasks if any(turn.ground_truth for turn in t.turns[1:]))
        record = run_episode(env, ReplayPolicy(), task)
    finally:
        env.close()
    assert record.reward == 1.0 and record.labels == ["pass", "pass"]
    verdict = tau2_verdict(task, record.calls, record.messages, load_domain("tau2_airline"), config)
    assert verdict["reward"] == 1.0
