"""BFCL's official multi-turn checker, called in-process on a trajectory's decoded calls.

``official_verdict(task, turns)`` takes, per turn, per step, the calls the agent made (the same decoded form
BFCL's FC handlers produce: ``name(arg=repr(value),...)``), and returns BFCL's ``multi_turn_checker`` result.
The checker keeps its backend instances in its module's globals under a name derived from the model name;
each call here uses a fresh name and removes those instances afterwards, so verdicts never leak state into
each other.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from seal_envs.task import Task, ToolCall

TurnCalls = Sequence[Sequence[ToolCall]]  # one turn: its steps, each the calls of one assistant message


def call_string(call: ToolCall) -> str:
    """A call as BFCL's FC decoder writes it (``convert_to_function_call``)."""
    return f"{call.name}({','.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


def bfcl_test_entry(task: Task) -> dict[str, Any]:
    """The fields of BFCL's test entry the checker reads."""
    return {"id": task.id, "initial_config": task.metadata["initial_config"],
            "involved_classes": task.metadata["involved_classes"]}


def official_verdict(task: Task, turns: Sequence[TurnCalls]) -> dict[str, Any]:
    """BFCL's verdict (``{"valid": bool, ...}``) for the agent's decoded calls, turn by turn.

    A turn count that differs from the task's is BFCL's ``force_terminated`` failure.
    """
    ground_truth = task.metadata["bfcl_ground_truth"]
    if len(turns) != len(ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"{len(turns)} turns answered, {len(ground_truth)} expected"}
    decoded = [[[call_string(c) for c in step] for step in turn if step] for turn in turns]
    model_name = f"seal_{uuid.uuid4().hex}"
    try:
        return multi_turn_checker(decoded, ground_truth, bfcl_test_entry(task), task.category, model_name)
    finally:
        forget_instances(model_name)


def forget_instances(model_name: str) -> None:
    """Drop the backend instances BFCL keeps in its executor's globals for a model name (all its entries)."""
    prefix = re.sub(r"[-./:]", "_", model_name)
    for name in [n for n in vars(multi_turn_utils) if n.startswith(prefix)]:
        del vars(multi_turn_utils)[name]
