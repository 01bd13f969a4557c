"""tau2-bench's deterministic grading, for tasks that carry it (``Task.metadata["checker"] == "tau2"``).

As tau2 grades airline (``reward_basis`` DB and COMMUNICATE in all 50 tasks): DB passes when the database
after replaying the episode's tool calls on a fresh database equals the one after replaying the ground-truth
actions on a fresh database (tau2 replays the trajectory's calls the same way); COMMUNICATE passes when every
``communicate_info`` string occurs, case-insensitively, in an assistant text message with commas removed. The
reward is 1 iff both pass. Replays run in a sandbox of the env's config (tool code never runs in this process);
an episode that made exactly the ground-truth calls has its database by determinism, without a replay.

This is the benchmark's own score and can differ from SEAL's env reward, which also judges every turn's state
and outputs against the per-turn ground truth. With an LLM user, an episode that tau2's limits (or SEAL's step
cap) ended before the user or the agent stopped is graded 0 unchecked, as tau2 grades a premature end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seal_envs.sandbox import SandboxConfig, SandboxError, get_pool
from seal_envs.spaces import Message
from seal_envs.spec.loader import ToolDomain
from seal_envs.task import Task, ToolCall
from seal_envs.users.conversation import PREMATURE
from seal_envs.verifier import REFERENCES, episode_classes

CHECKER = "tau2"


def final_database(task: Task, calls: Sequence[ToolCall], domain: ToolDomain, config: SandboxConfig) -> dict[str, Any]:
    """The state after ``calls`` (those naming no tool of the domain are skipped, failing ones change nothing)
    on a fresh copy of the task's initial state."""
    tools = {t.name: t for t in domain.tools}
    python_paths = tuple(str(p) for p in domain.python_paths)
    pool = get_pool(config)
    sandbox = pool.acquire()
    try:
        sandbox.reset(episode_classes(task, tools), python_paths, domain.code_hash())
        for call in calls:
            if call.name in tools:
                sandbox.call(tools[call.name].implementation, call.arguments)
        state = sandbox.snapshot()
    except SandboxError:
        pool.discard(sandbox)
        raise
    pool.release(sandbox)
    return state


def expected_database(task: Task, domain: ToolDomain, config: SandboxConfig) -> dict[str, Any]:
    """The state after the ground-truth actions: the env's reference replay's last turn (cached per process,
    as the env computed it) when the actions are its turns' calls, else a replay of its own."""
    expected = [ToolCall(a["name"], a["arguments"]) for a in task.metadata["actions"]]
    if expected != [call for turn in task.turns for call in turn.ground_truth]:
        return final_database(task, expected, domain, config)
    pool = get_pool(config)
    sandbox = pool.acquire()
    try:
        reference = REFERENCES.get(task, sandbox, {t.name: t for t in domain.tools},
                                   tuple(str(p) for p in domain.python_paths), code=domain.code_hash())
    except SandboxError:
        pool.discard(sandbox)
        raise
    pool.release(sandbox)
    return reference[-1].state


def text_messages(messages: Sequence[Message], calls: Sequence[Sequence[Sequence[ToolCall]]]) -> list[str]:
    """The assistant's messages to the user: those of the steps in which it made no tool call, after any the env
    sent before the policy's first step (an LLM user's conversation opens with tau2's greeting)."""
    steps = [step for turn in calls for step in turn]
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    given = len(assistant) - len(steps)
    return assistant[:given] + [content for content, step in zip(assistant[given:], steps) if not step]


def tau2_verdict(task: Task, calls: Sequence[Sequence[Sequence[ToolCall]]], messages: Sequence[Message],
                 domain: ToolDomain, config: SandboxConfig, termination: str | None = None) -> dict[str, Any]:
    """tau2's DB and COMMUNICATE checks of one episode; ``calls`` per turn and step as the env decoded them,
    ``termination`` why an LLM user's conversation ended."""
    if termination in PREMATURE:
        return {"db": False, "communicate": False, "missing_info": [], "reward": 0.0, "premature": termination}
    basis = task.metadata["reward_basis"]
    made = [call for turn in calls for step in turn for call in step]
    expected = expected_database(task, domain, config) if "DB" in basis else None
    same_calls = made == [ToolCall(a["name"], a["arguments"]) for a in task.metadata["actions"]]
    database = "DB" not in basis or same_calls or final_database(task, made, domain, config) == expected
    said = [m.lower().replace(",", "") for m in text_messages(messages, calls)]
    missing = [info for info in task.metadata["communicate_info"] if not any(info.lower() in m for m in said)
               ] if "COMMUNICATE" in basis else []
    return {"db": database, "communicate": not missing, "missing_info": missing,
            "reward": float(database and not missing)}
