"""Run one policy episode through ``ToolUseEnv`` and keep what the BFCL report and the official checker need."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from seal_envs.evaluation.fingerprint import RequestLog
from seal_envs.evaluation.policies import Policy
from seal_envs.task import Task, ToolCall


@dataclass
class EpisodeRecord:
    """One task's outcome. ``passed`` is the BFCL score, which is the env's reward (a force-quit before the last
    turn already fails it); ``calls`` are the calls the env decoded, per played turn and step."""

    task_id: str
    category: str
    reward: float
    labels: list[str]
    step_cap_hit: bool = False
    infrastructure_error: bool = False
    task_error: str | None = None
    calls: list[list[list[ToolCall]]] = field(default_factory=list)
    diagnoses: list[dict[str, Any]] = field(default_factory=list)
    official_valid: bool | None = None
    requests_sha256: str = ""  # hash of every request the policy was sent (``seal_envs.evaluation.fingerprint``)

    @property
    def passed(self) -> bool:
        return self.reward == 1.0

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
    record = EpisodeRecord(task.id, task.category, 0.0, [], calls=[[]], task_error=info.get("task_error"))
    requests = RequestLog()
    turn = 0
    while True:
        requests.add(messages, info["tools"])
        action = policy.act(messages, info["tools"], turn)
        messages.append({"role": "assistant", "content": action})
        observation, reward, terminated, truncated, info = env.step(action)
        messages.extend(observation)
        record.calls[turn].append(list(info.get("calls", ())))
        if info.get("diagnosis"):
            record.diagnoses.append(info["diagnosis"])
            record.step_cap_hit |= bool(info["diagnosis"]["evidence"].get("step_cap_hit"))
        if terminated or truncated:
            break
        if info["turn_ended"]:
            turn += 1
            record.calls.append([])
    record.reward = float(reward)
    record.labels = list(info["labels"])
    record.infrastructure_error = bool(info.get("infrastructure_error"))
    record.requests_sha256 = requests.hexdigest()
    return record
