"""Tasks: multi-turn episodes with an initial state and ground-truth calls per user turn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seal_envs.spec.loader import SpecError, cached_by_file, read_json, validate_document

TASK_FILE = "tasks.json"


@dataclass(frozen=True)
class ToolCall:
    """A parsed or ground-truth call: tool name and JSON arguments."""

    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    def key(self) -> str:
        """Canonical string, for comparing calls independent of key order."""
        return json.dumps(self.to_json(), sort_keys=True)


@dataclass(frozen=True)
class Turn:
    user: str
    ground_truth: tuple[ToolCall, ...]
    required_response: tuple[str, ...] = ()
    expects_abstention: bool = False
    add_tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    id: str
    domain: str
    initial_state: dict[str, Any]
    turns: tuple[Turn, ...]
    category: str = "base"
    tools: tuple[str, ...] | None = None  # None: every tool of the domain
    system_prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def task_from_json(doc: dict[str, Any], domain: str) -> Task:
    return Task(
        id=doc["id"],
        domain=domain,
        category=doc.get("category", "base"),
        initial_state=doc["initial_state"],
        tools=tuple(doc["tools"]) if "tools" in doc else None,
        system_prompt=doc.get("system_prompt"),
        turns=tuple(
            Turn(
                user=t["user"],
                ground_truth=tuple(ToolCall(c["name"], c["arguments"]) for c in t["ground_truth"]),
                required_response=tuple(t.get("required_response", ())),
                expects_abstention=t.get("expects_abstention", False),
                add_tools=tuple(t.get("add_tools", ())),
            )
            for t in doc["turns"]
        ),
    )


def task_to_json(task: Task) -> dict[str, Any]:
    """The ``tasks.json`` entry of a task (inverse of ``task_from_json``)."""
    doc: dict[str, Any] = {"id": task.id, "category": task.category, "initial_state": task.initial_state}
    if task.tools is not None:
        doc["tools"] = list(task.tools)
    if task.system_prompt is not None:
        doc["system_prompt"] = task.system_prompt
    doc["turns"] = [{"user": t.user, "ground_truth": [c.to_json() for c in t.ground_truth],
                     "required_response": list(t.required_response), "expects_abstention": t.expects_abstention,
                     "add_tools": list(t.add_tools)} for t in task.turns]
    return doc


def write_tasks(tasks: Sequence[Task], path: str | Path) -> Path:
    """Write ``tasks`` (all of one domain) as a ``tasks.json`` file that ``load_tasks`` reads back."""
    domains = {t.domain for t in tasks}
    if len(domains) != 1:
        raise ValueError(f"a tasks.json holds the tasks of one domain, not {sorted(domains)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"domain": domains.pop(), "tasks": [task_to_json(t) for t in tasks]}, indent=1))
    return path


@cached_by_file(TASK_FILE)
def load_tasks(file: Path) -> tuple[Task, ...]:
    """Load ``tasks.json`` of a domain directory (a bare name means a bundled domain)."""
    document = read_json(file)
    validate_document(document, "task_schema.json", file)
    tasks = [task_from_json(t, document["domain"]) for t in document["tasks"]]
    seen: set[str] = set()
    for i, task in enumerate(tasks):
        if task.id in seen:
            raise SpecError(file, f"$.tasks[{i}].id", f"duplicate task id {task.id!r}")
        seen.add(task.id)
    return tuple(tasks)
