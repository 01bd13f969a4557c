"""Ground truth checked against the tools' schemas: every ground-truth call names a tool the task offers and
obeys its JSON Schema. A call that breaks the schema still replays (the reference is whatever the ground truth
did), so the env would score an agent against a wrong answer without this check.

``gym.make`` runs it once per process and task set (cached after) and warns loudly (``GroundTruthWarning``,
naming the first few calls): a benchmark's own data is played as it is (BFCL V3 has 5 such calls in 800 tasks);
``seal-envs validate`` reports every problem with its file and JSON path and fails.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seal_envs.formats import ParseLimits
from seal_envs.spec.loader import ToolSpec
from seal_envs.spec.patterns import bounded_validator
from seal_envs.task import Task, ToolCall

SHOWN = 5  # problems named in gym.make's error; `seal-envs validate` lists them all


def schema_violations(tool: ToolSpec, arguments: dict[str, Any],
                      pattern_timeout_s: float = ParseLimits.pattern_timeout_s) -> tuple[dict[str, Any], ...]:
    """Where ``arguments`` break the tool's schema: missing, unknown, wrongly typed or out-of-enum arguments."""
    props = tool.parameters.get("properties", {})
    found: list[dict[str, Any]] = [{"kind": "missing", "argument": a} for a in tool.required if a not in arguments]
    found += [{"kind": "unknown", "argument": a} for a in arguments if a not in props]
    known = {k: v for k, v in arguments.items() if k in props}
    schema = {**tool.parameters, "required": []}
    for error in bounded_validator(schema, pattern_timeout_s).iter_errors(known):
        argument = error.absolute_path[0] if error.absolute_path else None
        if error.validator == "type":
            found.append({"kind": "type", "argument": argument, "expected": error.validator_value})
        elif error.validator == "enum":
            found.append({"kind": "enum", "argument": argument})
        elif error.validator != "additionalProperties":
            found.append({"kind": "schema", "argument": argument, "message": error.message})
    return tuple(found)


def violation_text(violation: dict[str, Any], tool_parameters: dict[str, Any]) -> str:
    argument, kind = violation.get("argument"), violation["kind"]
    if kind == "missing":
        return f"misses the required argument {argument!r}"
    if kind == "unknown":
        return f"passes {argument!r}, which the tool does not define"
    if kind == "type":
        return f"passes {argument!r} of the wrong type (the tool wants {violation['expected']!r})"
    if kind == "enum":
        allowed = tool_parameters["properties"][argument].get("enum")
        return f"passes {argument!r} outside the tool's enum {allowed}"
    return f"passes {argument!r} that breaks the tool's schema: {violation['message']}"


def call_text(call: ToolCall) -> str:
    return f"{call.name}({json.dumps(call.arguments, sort_keys=True)})"


class GroundTruthWarning(UserWarning):
    """Ground-truth calls that break their tools' schemas (``warnings.simplefilter("error", GroundTruthWarning)``
    turns it into an error)."""


@dataclass(frozen=True)
class GroundTruthProblem:
    task_id: str
    turn: int
    json_path: str  # within the tasks file, e.g. $.tasks[3].turns[0].ground_truth[1]
    message: str
    unknown_tool: bool = False  # the call names no tool of the domain (nothing to replay)


def ground_truth_problems(task: Task, index: int, tools: Mapping[str, ToolSpec]) -> list[GroundTruthProblem]:
    """Every ground-truth call of ``task`` (the ``index``-th of its file) that names no tool, a tool the task does
    not offer in that turn, or breaks its tool's schema."""
    available = set(task.tools if task.tools is not None else tools)
    problems = []
    for t, turn in enumerate(task.turns):
        available |= set(turn.add_tools)
        for j, call in enumerate(turn.ground_truth):
            path = f"$.tasks[{index}].turns[{t}].ground_truth[{j}]"
            tool = tools.get(call.name)
            if tool is None:
                problems.append(GroundTruthProblem(task.id, t, path, f"ground-truth call {call_text(call)} names no "
                                                   "tool of the domain", unknown_tool=True))
                continue
            if call.name not in available:
                problems.append(GroundTruthProblem(task.id, t, path, f"ground-truth call {call_text(call)} uses a "
                                                   "tool the task does not offer in this turn (its 'tools' and the "
                                                   "turns' 'add_tools')"))
            problems += [GroundTruthProblem(task.id, t, path, f"ground-truth call {call_text(call)} "
                                            f"{violation_text(v, tool.parameters)}")
                         for v in schema_violations(tool, call.arguments)]
    return problems


_checked: dict[tuple[int, ...], tuple[Sequence[Task], list[GroundTruthProblem]]] = {}
_checked_lock = threading.Lock()


def check_ground_truth(tasks: Sequence[Task], tools: Mapping[str, ToolSpec], code: str) -> list[GroundTruthProblem]:
    """The ground-truth problems of ``tasks``, computed once per process for these task objects and tool code
    (every env of a Ray worker shares the cached tasks)."""
    key = (hash(code), *map(id, tasks))
    with _checked_lock:
        hit = _checked.get(key)
    if hit is not None:
        return hit[1]
    problems = [p for i, task in enumerate(tasks) for p in ground_truth_problems(task, i, tools)]
    with _checked_lock:
        _checked[key] = (tasks, problems)  # the tasks are kept, so their ids stay theirs
    return problems


def describe(problems: Sequence[GroundTruthProblem], where: str) -> str:
    shown = "\n  ".join(f"task {p.task_id!r}, turn {p.turn}, at {p.json_path}: {p.message}" for p in problems[:SHOWN])
    more = f"\n  ... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return (f"{len(problems)} ground-truth call(s) of {where} do not fit their tools (schema or availability):"
            f"\n  {shown}{more}")


__all__ = ["GroundTruthProblem", "GroundTruthWarning", "call_text", "check_ground_truth", "describe",
           "ground_truth_problems",
           "schema_violations", "violation_text"]
