"""A task played with an LLM user: one conversation instead of the task's fixed turns, ended as tau2 ends it.

The whole conversation is one SEAL turn whose ground truth is every ground-truth call of the task, so the
verifier judges the final state and outputs against the whole ground truth and the diagnosis gives one label
per episode (the episode-level verdict; per-turn labels need the fixed turns of the scripted user). The user's
messages arrive inside that turn, and the per-turn step cap counts tool-calling steps per user message.

tau2's limits end it early: ``max_steps`` messages exchanged (each agent message, the tool results of one
agent message together, each user message; the greeting not counted) and ``max_errors`` failed tool calls,
checked whenever the next message goes to the agent or the user, as tau2's orchestrator checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seal_envs.task import Task, Turn
from seal_envs.users.config import UserConfig

PREMATURE = frozenset({"max_steps", "too_many_errors", "step_cap"})  # tau2 grades an episode ended so 0


def conversation_task(task: Task, user: UserConfig) -> Task:
    """``task`` as one conversation turn; refuses a task with no user scenario for the LLM to play."""
    scenario = task.metadata.get("user_scenario")
    if not isinstance(scenario, dict) or "instructions" not in scenario:
        raise ValueError(f"user {user.spec!r} plays each task's user scenario (tau2's user_scenario), and task "
                         f"{task.id!r} has none: use user='scripted' for this domain")
    turn = Turn(user="", ground_truth=tuple(c for t in task.turns for c in t.ground_truth),
                required_response=tuple(r for t in task.turns for r in t.required_response),
                add_tools=tuple(dict.fromkeys(n for t in task.turns for n in t.add_tools)))
    return replace(task, turns=(turn,))


@dataclass
class Conversation:
    """tau2's counters of one episode."""

    config: UserConfig
    steps: int = 0
    errors: int = 0

    def add(self, messages: int, errors: int = 0) -> str | None:
        """Count exchanged messages and failed calls; the termination a reached limit calls for, if any."""
        self.steps += messages
        self.errors += errors
        if self.steps >= self.config.max_steps:
            return "max_steps"
        if self.errors >= self.config.max_errors:
            return "too_many_errors"
        return None
