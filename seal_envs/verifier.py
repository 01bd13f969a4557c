"""The executable verifier: replay the ground truth on a fresh copy of the initial state, compare per turn.

A turn passes when
(1) the state after the agent's turn equals the state after the ground-truth calls (every public attribute of
    every backend instance, as BFCL's ``state_checker`` compares them);
(2) every output the ground-truth calls produced in that turn appears among the agent's outputs, counted with
    multiplicity and in any order (BFCL's ``response_checker``: read-only calls leave no state, so their results
    are what the user needed). ``outputs`` are the agent's outputs so far in the episode: BFCL accepts a result
    the agent already obtained in an earlier turn;
(3) a turn whose ground truth has calls saw at least one call (BFCL's ``empty_turn_model_response``);
(4) the final answer contains the task's required response content, if any;
(5) a turn whose ground truth has no call was answered in text without calling a tool (the agent must ask or
    decline, not guess; an empty answer does neither).
The episode's reward is 1 iff every turn passes.

BFCL tasks (``Task.metadata["checker"] == "bfcl"``) follow the official ``multi_turn_checker`` exactly: a turn
whose ground truth is empty is not judged at all (no state, output or abstention check; calls made there still
run, so their effects show in the next turn's state), because BFCL's irrelevance checker is not part of its
multi-turn score. The diagnosis still labels such a call ``spurious_tool_call``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seal_envs.diagnosis import TurnVerdict
from seal_envs.protocol import NATIVE, Protocol
from seal_envs.sandbox.base import CallResult, Sandbox
from seal_envs.spec.loader import ToolSpec
from seal_envs.task import Task, Turn

MAX_DIFF_PATHS = 20


@dataclass(frozen=True)
class TurnReference:
    """What the ground truth produces in one turn."""

    state: dict[str, Any]
    outputs: tuple[str, ...]
    judged: bool = True  # False: the official checker skips this turn (BFCL, empty ground truth)


def episode_classes(task: Task, tools: Mapping[str, ToolSpec]) -> dict[str, Any]:
    """Every implementation class the task may touch, with its initial state (None: default)."""
    names = set(task.tools if task.tools is not None else tools) | {n for t in task.turns for n in t.add_tools}
    paths = set(task.initial_state) | {tools[n].class_path for n in names if n in tools}
    return {path: task.initial_state.get(path) for path in sorted(paths)}


def replay_turns(task: Task, sandbox: Sandbox, tools: Mapping[str, ToolSpec], python_paths: Sequence[str] = (),
                 code: str = "") -> Iterator[tuple[list[CallResult], dict[str, Any]]]:
    """Execute the ground truth turn by turn from the initial state, in a fresh episode process of the sandbox
    (which no agent's call has touched); per turn, each call's result and the state after the turn."""
    sandbox.reset(episode_classes(task, tools), python_paths, code)
    for turn in task.turns:
        results = []
        for call in turn.ground_truth:
            if call.name not in tools:
                raise KeyError(f"task {task.id!r}: ground-truth call to unknown tool {call.name!r}")
            results.append(sandbox.call(tools[call.name].implementation, call.arguments))
        yield results, sandbox.snapshot()


def replay_reference(task: Task, sandbox: Sandbox, tools: Mapping[str, ToolSpec], python_paths: Sequence[str] = (),
                     protocol: Protocol = NATIVE, code: str = "") -> tuple[TurnReference, ...]:
    """The ground truth's state and outputs per turn (outputs in the protocol's comparable form)."""
    return tuple(TurnReference(state=state, outputs=tuple(protocol.output(r) for r in results),
                               judged=bool(turn.ground_truth) or task.metadata.get("checker") != "bfcl")
                 for turn, (results, state) in zip(task.turns, replay_turns(task, sandbox, tools, python_paths, code)))


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if len(out) >= MAX_DIFF_PATHS or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            _diff(a.get(key), b.get(key), f"{path}.{key}", out)
    else:
        out.append(path)


def state_diff(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[str, ...]:
    """Paths (``Class.attr.key``) where two snapshots differ, at most ``MAX_DIFF_PATHS``."""
    out: list[str] = []
    _diff(expected, actual, "$", out)
    return tuple(out)


def judge_turn(reference: TurnReference, turn: Turn, state: dict[str, Any], outputs: Sequence[str],
               final_response: str, calls_made: int) -> TurnVerdict:
    """Compare one turn with its reference; ``outputs`` are the agent's outputs so far, ``calls_made`` this turn's
    parsed calls (including calls to unavailable tools, which BFCL also counts)."""
    if not reference.judged:
        return TurnVerdict(state_matches=True, outputs_match=True, response_matches=True)
    diff = state_diff(reference.state, state)
    missing = Counter(reference.outputs) - Counter(outputs)
    answer = final_response.lower()
    return TurnVerdict(
        state_matches=not diff,
        outputs_match=not missing and (calls_made > 0 or not turn.ground_truth),
        response_matches=all(s.lower() in answer for s in turn.required_response),
        abstention_ok=bool(turn.ground_truth) or (calls_made == 0 and bool(answer.strip())),
        state_diff=diff,
        missing_outputs=sum(missing.values()),
    )


def task_fingerprint(task: Task) -> str:
    """Identifies a task's ground truth, so a reference replay is computed once per process."""
    doc = [task.domain, task.id, task.initial_state, [[c.to_json() for c in t.ground_truth] for t in task.turns]]
    return hashlib.sha1(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


class ReferenceCache:
    """Process-wide cache of ground-truth replays (they are deterministic), safe across threads; keyed by the
    task and the domain's code (``ToolDomain.code_hash``), so edited tool code is replayed again."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[TurnReference, ...]] = {}
        self._lock = threading.Lock()

    def get(self, task: Task, sandbox: Sandbox, tools: Mapping[str, ToolSpec], python_paths: Sequence[str] = (),
            protocol: Protocol = NATIVE, code: str = "") -> tuple[TurnReference, ...]:
        key = f"{protocol.name}/{task_fingerprint(task)}/{code}"
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            cached = replay_reference(task, sandbox, tools, python_paths, protocol, code)
            with self._lock:
                self._cache[key] = cached
        return cached


REFERENCES = ReferenceCache()
