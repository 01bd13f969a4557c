"""Perturbation families for BFCL conformance: scripted trajectories on which the env must agree with BFCL.

A family turns a task into a script: per turn, the raw assistant messages a scripted model sends (after them it
answers in plain text). Each family probes one way eval mode could drift from BFCL: the ground truth in other
shapes, wrong calls and arguments, calls BFCL's decoder rejects or accepts, functions not offered, the step cap.
``judge(env, task, family)`` plays one trajectory through the env and scores the same decoded calls with BFCL's
official checker; ``tests/test_bfcl_conformance.py`` requires agreement on every trajectory of every family over
all 800 tasks, and ``benchmarks/bfcl_conformance.py`` prints the table. Every choice is seeded by task and family.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seal_envs.bfcl import MAX_STEPS_PER_TURN
from seal_envs.bfcl.checker import official_verdict
from seal_envs.evaluation.policies import ABSTAIN_TEXT, DONE_TEXT
from seal_envs.evaluation.runner import EpisodeRecord, run_episode
from seal_envs.parsing import format_tool_call
from seal_envs.spaces import Message
from seal_envs.spec.loader import ToolSpec
from seal_envs.task import Task, ToolCall

Script = list[list[str]]  # per turn, the raw assistant messages before the closing text answer
Tools = Mapping[str, ToolSpec]
BROKEN_BLOCK = '<tool_call>\n{"name": "ls", "arguments": {"a": \n</tool_call>'


def message(calls: Sequence[ToolCall]) -> str:
    """One assistant message making ``calls`` in the Hermes/Qwen format."""
    return "\n".join(format_tool_call(c) for c in calls)


class ScriptPolicy:
    """Sends a script's messages turn by turn, then closes each turn with a text answer."""

    def __init__(self, script: Callable[[Task], Script]):
        self.script = script
        self._plan: Script = []
        self._sent: list[int] = []

    def start(self, task: Task) -> None:
        self._plan = self.script(task)
        self._sent = [0] * len(self._plan)

    def act(self, messages: Sequence[Message], tools: list[dict[str, Any]], turn: int) -> str:
        planned = self._plan[turn] if turn < len(self._plan) else []
        if turn < len(self._plan) and self._sent[turn] < len(planned):
            self._sent[turn] += 1
            return planned[self._sent[turn] - 1]
        return DONE_TEXT if planned else ABSTAIN_TEXT


# ------------------------------------------------------------------------------------------- helpers


def _ground_truth(task: Task) -> list[list[ToolCall]]:
    return [list(t.ground_truth) for t in task.turns]


def _as_script(turns: list[list[ToolCall]]) -> Script:
    return [[message(calls)] if calls else [] for calls in turns]


def _turn_with_calls(task: Task, rng: random.Random, at_least: int = 1) -> int | None:
    turns = [i for i, t in enumerate(task.turns) if len(t.ground_truth) >= at_least]
    return rng.choice(turns) if turns else None


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return None


def _with_argument(task: Task, rng: random.Random, change: Callable[[Any], Any]) -> Script | None:
    """The ground truth with one argument (chosen among those ``change`` applies to) changed."""
    script = _ground_truth(task)
    places = [(i, j, k) for i, calls in enumerate(script) for j, c in enumerate(calls)
              for k, v in c.arguments.items() if change(v) is not None]
    if not places:
        return None
    i, j, key = rng.choice(places)
    call = script[i][j]
    script[i][j] = ToolCall(call.name, {**call.arguments, key: change(call.arguments[key])})
    return _as_script(script)


def _with_turn(task: Task, rng: random.Random, edit: Callable[[list[ToolCall]], list[str] | None],
               at_least: int = 1) -> Script | None:
    """The ground truth with the messages of one turn (having ``at_least`` calls) replaced by ``edit(calls)``."""
    turn = _turn_with_calls(task, rng, at_least)
    if turn is None:
        return None
    script = _as_script(_ground_truth(task))
    edited = edit(list(task.turns[turn].ground_truth))
    if edited is None:
        return None
    script[turn] = edited
    return script


# ------------------------------------------------------------------------------------------- families


def ground_truth(task: Task, rng: random.Random, tools: Tools) -> Script:
    return _as_script(_ground_truth(task))


def one_call_per_step(task: Task, rng: random.Random, tools: Tools) -> Script:
    return [[message([c]) for c in t.ground_truth] for t in task.turns]


def drop_call(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    def edit(calls: list[ToolCall]) -> list[str]:
        del calls[rng.randrange(len(calls))]
        return [message(calls)] if calls else []
    return _with_turn(task, rng, edit)


def answer_early(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    return _with_turn(task, rng, lambda calls: [message(calls[: rng.randrange(1, len(calls))])], at_least=2)


def reorder_calls(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    return _with_turn(task, rng, lambda calls: [message(calls[::-1])], at_least=2)


def repeat_call(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    return _with_turn(task, rng, lambda calls: [message(calls + [rng.choice(calls)])])


def change_argument(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    return _with_argument(task, rng, _changed)


def float_numbers(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """Integers sent as floats (5 -> 5.0): Python's == makes them equal in BFCL's state and output checks."""
    return _with_argument(task, rng, lambda v: float(v) if type(v) is int else None)


def nudge_number(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """A number off by 0.2 (e.g. a logarithm of 20.2 for 20: equal at low precision, not in BFCL's mpf)."""
    return _with_argument(task, rng, lambda v: v + 0.2 if type(v) in (int, float) else None)


def number_as_string(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    return _with_argument(task, rng, lambda v: str(v) if type(v) in (int, float) else None)


def extra_tool(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """A call of an offered tool without required arguments, in any turn (also one that expects no call)."""
    free = [n for n in task.tools if not tools[n].required]
    if not free:
        return None
    script = _ground_truth(task)
    script[rng.randrange(len(script))].append(ToolCall(rng.choice(free), {}))
    return _as_script(script)


def odd_arguments(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """An extra argument Python cannot take: a name with a space (a SyntaxError in BFCL's ``eval``) or NaN."""
    extra = rng.choice([{"not a name": 1}, {"value": float("nan")}])
    return _with_turn(task, rng, lambda calls: [message([ToolCall(c.name, {**c.arguments, **extra}) if i == 0 else c
                                                         for i, c in enumerate(calls)])])


def call_unoffered(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """A miss_func task's missed function called (as its holdout turn will) one turn before it is offered."""
    holdouts = [int(k) for k in task.metadata.get("missed_function", {})]
    if not holdouts:
        return None
    turn = rng.choice(holdouts)
    script = _ground_truth(task)
    missed = set(task.metadata["missed_function"][str(turn)])
    early = [c for c in task.turns[turn].ground_truth if c.name in missed]
    if not early:
        return None
    script[turn - 1] = early + script[turn - 1]
    return _as_script(script)


def hallucinated_function(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    return _with_turn(task, rng, lambda calls: [message(calls + [ToolCall(calls[0].name + "_all", {})])])


def spurious_early_call(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """In a turn that expects no call, the next turn's calls made already."""
    turns = [i for i, t in enumerate(task.turns[:-1]) if not t.ground_truth and task.turns[i + 1].ground_truth]
    if not turns:
        return None
    turn = rng.choice(turns)
    script = _ground_truth(task)
    script[turn] = list(script[turn + 1])
    return _as_script(script)


def malformed_first(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """A broken call block sent alone before the turn's calls: BFCL ends the turn on it."""
    return _with_turn(task, rng, lambda calls: [BROKEN_BLOCK, message(calls)])


def malformed_alongside(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """A broken block in the same message as the turn's calls: BFCL's decoder drops it and runs the rest."""
    return _with_turn(task, rng, lambda calls: [message(calls) + "\n" + BROKEN_BLOCK])


def parameters_key(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """One call written with "parameters" instead of "arguments": BFCL rejects the whole message."""
    def edit(calls: list[ToolCall]) -> list[str]:
        j = rng.randrange(len(calls))
        blocks = [format_tool_call(c) for c in calls]
        wrong = {"name": calls[j].name, "parameters": calls[j].arguments}
        blocks[j] = f"<tool_call>\n{json.dumps(wrong)}\n</tool_call>"
        return ["\n".join(blocks)]
    return _with_turn(task, rng, edit)


def inline_tags(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """Blocks without the newlines inside the tags: BFCL's decoder finds no call."""
    return _with_turn(task, rng, lambda calls: [
        "".join(f"<tool_call>{json.dumps(c.to_json())}</tool_call>" for c in calls)])


def string_arguments(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """Arguments double-encoded as a JSON string: BFCL's decoder accepts them."""
    return _with_turn(task, rng, lambda calls: ["\n".join(
        f"<tool_call>\n{json.dumps({'name': c.name, 'arguments': json.dumps(c.arguments)})}\n</tool_call>"
        for c in calls)])


def think_first(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """Reasoning (with a call-like block inside) before ``</think>``: BFCL decodes only what follows it."""
    return _with_turn(task, rng, lambda calls: [
        f"<think>\nMaybe {message(calls[:1])} is wrong.\n</think>\n\n{message(calls)}"])


def step_cap(task: Task, rng: random.Random, tools: Tools) -> Script | None:
    """A turn's calls, then calls of a hallucinated function up to BFCL's force-quit (its 21st step)."""
    filler = message([ToolCall("look_around", {})])
    return _with_turn(task, rng, lambda calls: [message(calls)] + [filler] * (MAX_STEPS_PER_TURN - 1))


Family = Callable[[Task, random.Random, Tools], Script | None]
FAMILIES: dict[str, Family] = {f.__name__: f for f in (
    ground_truth, one_call_per_step, drop_call, answer_early, reorder_calls, repeat_call, change_argument,
    float_numbers, nudge_number, number_as_string, odd_arguments, extra_tool, call_unoffered, hallucinated_function,
    spurious_early_call, malformed_first, malformed_alongside, parameters_key, inline_tags, string_arguments,
    think_first, step_cap)}
"""Every family by name."""


def family_script(task: Task, family: str, tools: Tools) -> Script | None:
    """The family's script for ``task`` (None: the family does not apply to it), seeded by task and family."""
    return FAMILIES[family](task, random.Random(f"{task.id}/{family}"), tools)


@dataclass(frozen=True)
class Judgement:
    task_id: str
    family: str
    script: Script
    record: EpisodeRecord
    official: dict[str, Any]

    @property
    def agrees(self) -> bool:
        return self.record.passed == bool(self.official["valid"])


def judge(env, task: Task, family: str) -> Judgement | None:
    """One trajectory of ``family`` on ``task`` through the env, and BFCL's verdict on the calls it decoded."""
    script = family_script(task, family, env.unwrapped.tools)
    if script is None:
        return None
    record = run_episode(env, ScriptPolicy(lambda _task: script), task)
    return Judgement(task.id, family, script, record, official_verdict(task, record.calls))
