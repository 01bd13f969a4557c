"""The bundled shop tasks through the real env: ground truth scores 1.0, corrupted policies score 0."""

from __future__ import annotations

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.parsing import format_tool_call
from seal_envs.task import ToolCall, load_tasks

TASKS = load_tasks("shop")


def answer(turn) -> str:
    if turn.expects_abstention or not turn.ground_truth:
        return "I can't do that yet: could you tell me more?"
    return "Done. " + " ".join(turn.required_response)


def play(env, task, corrupt=None):
    """Play ``task`` with the ground truth, optionally corrupting it per turn; return (reward, labels)."""
    env.reset(options={"task_id": task.id})
    for index, turn in enumerate(task.turns):
        calls = list(turn.ground_truth) if corrupt is None else corrupt(index, turn)
        for call in calls:
            _, _, terminated, _, info = env.step(format_tool_call(call))
            assert not info["turn_ended"]
        _, reward, terminated, truncated, info = env.step(answer(turn))
        assert info["turn_ended"]
    assert terminated and not truncated
    return reward, info["labels"]


@pytest.fixture(scope="module")
def env():
    env = ToolUseEnv(domain="shop", sandbox="inprocess")
    yield env
    env.close()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_ground_truth_scores_one(env, task):
    reward, labels = play(env, task)
    assert reward == 1.0 and set(labels) <= {"pass", "correct_abstention"}, labels


@pytest.mark.docker
def test_ground_truth_in_docker(docker_daemon):
    env = ToolUseEnv(domain="shop", sandbox="docker")
    try:
        for task in TASKS[:3]:
            assert play(env, task)[0] == 1.0
        # the calls ran in a container of the daemon, which is still up while the env holds it
        assert docker_daemon.containers.get(env._sandbox.container_id).status == "running"
    finally:
        env.close()


def first_turn_with_calls(task):
    return next(i for i, t in enumerate(task.turns) if t.ground_truth)


def drop_last_call(task):
    target = first_turn_with_calls(task)
    return lambda i, t: list(t.ground_truth[:-1]) if i == target else list(t.ground_truth)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_dropping_a_call_scores_zero_with_a_failure_label(env, task):
    reward, labels = play(env, task, drop_last_call(task))
    target = first_turn_with_calls(task)
    assert reward == 0.0
    assert labels[target] in {"missing_tool_call", "state_mismatch", "response_mismatch"}, labels


def test_hallucinated_tool_is_invalid_tool_call(env):
    task = TASKS[0]
    target = first_turn_with_calls(task)
    reward, labels = play(env, task, lambda i, t: [ToolCall("teleport_parcel", {})] if i == target else list(t.ground_truth))
    assert reward == 0.0 and labels[target] == "invalid_tool_call"


def test_missing_required_argument_is_argument_mismatch(env):
    task = next(t for t in TASKS if any(c.arguments for turn in t.turns for c in turn.ground_truth))
    target = next(i for i, t in enumerate(task.turns) if any(c.arguments for c in t.ground_truth))

    def corrupt(i, turn):
        if i != target:
            return list(turn.ground_truth)
        calls = list(turn.ground_truth)
        j = next(k for k, c in enumerate(calls) if c.arguments)
        calls[j] = ToolCall(calls[j].name, {})
        return calls

    reward, labels = play(env, task, corrupt)
    assert reward == 0.0 and labels[target] == "argument_mismatch", labels


def test_calling_in_an_abstention_turn_is_spurious(env):
    task = next(t for t in TASKS if t.category == "miss_func")
    target = next(i for i, t in enumerate(task.turns) if t.expects_abstention)
    later = task.turns[target + 1].ground_truth
    reward, labels = play(env, task, lambda i, t: list(later) if i == target else list(t.ground_truth))
    assert reward == 0.0 and labels[target] == "spurious_tool_call"


def test_guessing_a_missing_parameter_is_spurious(env):
    task = next(t for t in TASKS if t.category == "miss_param")
    target = next(i for i, t in enumerate(task.turns) if not t.ground_truth)
    guess = task.turns[target + 1].ground_truth
    reward, labels = play(env, task, lambda i, t: list(guess) if i == target else list(t.ground_truth))
    assert reward == 0.0 and labels[target] == "spurious_tool_call"
