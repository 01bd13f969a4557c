"""Run one policy episode through ``ToolUseEnv`` and keep what the BFCL report and the official checker need."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from seal_envs.evaluation.policies import Policy
from seal_envs.parsing import parse_tool_calls
from seal_envs.task import Task, ToolCall


@dataclass
class EpisodeRecord:
    """One task's outcome. ``passed`` is the BFCL score: the verifier's reward, and no force-quit turn."""

    task_id: str
    category: str
    reward: float
    labels: list[str]
    step_cap_hit: bool = False
    infrastructure_error: bool = False
    task_error: str | None = None
    calls: list[list[list[ToolCall]]] = field(default_factory=list)  # per turn, per step, the parsed calls
    diagnoses: list[dict[str, Any]] = field(default_factory=list)
    official_valid: bool | None = None

    @property
    def passed(self) -> bool:
        return self.reward == 1.0 and not self.step_cap_hit

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["calls"] = [[[c.to_json() for c in step] for step in turn] for turn in self.calls]
        doc["passed"] = self.passed
        return doc


def run_episode(env, policy: Policy, task: Task) -> EpisodeRecord:
    """Play ``task`` to the end with ``policy``; the env's faults end the episode and are recorded, not raised."""
    observation, info = env.reset(options={"task_id": task.id})
    policy.start(task)
    messages = list(observation)
    calls: list[list[list[ToolCall]]] = [[] for _ in task.turns]
    record = EpisodeRecord(task.id, task.category, 0.0, [], calls=calls, task_error=info.get("task_error"))
    turn = 0
    while True:
        action = policy.act(messages, info["tools"], turn)
        calls[turn].append(list(parse_tool_calls(action).calls))
        messages.append({"role": "assistant", "content": action})
        observation, reward, terminated, truncated, info = env.step(action)
        messages.extend(observation)
        if info.get("diagnosis"):
            record.diagnoses.append(info["diagnosis"])
            record.step_cap_hit |= bool(info["diagnosis"]["evidence"].get("step_cap_hit"))
        if terminated or truncated:
            break
        turn += bool(info["turn_ended"])
    record.reward = float(reward)
    record.labels = list(info["labels"])
    record.infrastructure_error = bool(info.get("infrastructure_error"))
    return record
