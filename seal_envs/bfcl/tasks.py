"""BFCL V3 multi-turn entries as SEAL tasks, built at run time from bfcl-eval's data.

Per entry: one ``Turn`` per BFCL turn; the ground truth's python-call strings are parsed with ``ast`` into
``ToolCall``s (positional arguments named from the backend method's signature); the initial state is keyed by
our class path, exactly as BFCL's checker loads it (``initial_config.get(class, {})`` for every involved class,
nothing for stateless ones, the long-context flag for that category). The original strings, the BFCL config and
the missed functions stay in ``Task.metadata`` for the official checker.

Category rules:
- miss_func: the missed function is not offered until its holdout turn, whose user message is BFCL's
  "I have updated some more functions ..." prompt and whose ``add_tools`` names it (appended to the offered
  tools, with its doc's own description, as BFCL does); the turn before (ground truth ``[]``) has
  ``expects_abstention=True``: no tool fits. BFCL runs any method of an involved class, offered or not (see
  ``seal_envs.bfcl.protocol``), so one entry's ground truth (miss_func_49, ``tail``) calls its missed function
  before the holdout turn, and a model may too.
- miss_param: the turn whose ground truth is ``[]`` lacks a required value: the agent must ask, not call.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from typing import Any

from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

from seal_envs.bfcl import data
from seal_envs.bfcl.backends import LONG_CONTEXT_KEY
from seal_envs.bfcl.protocol import ADDED_DESCRIPTIONS
from seal_envs.task import Task, ToolCall, Turn

DOMAIN = "bfcl"
CHECKER = "bfcl"  # Task.metadata["checker"]: the verifier applies BFCL's turn rules (see seal_envs.verifier)


class GroundTruthError(ValueError):
    """A BFCL ground-truth string that is not a plain call with literal arguments."""


@cache
def _signatures() -> dict[str, tuple[str, ...]]:
    """Tool name -> parameter names in signature order (BFCL's ground truth passes some positionally)."""
    names: dict[str, tuple[str, ...]] = {}
    for backend in data.BACKENDS:
        module, cls = data.class_path(backend).split(":")
        klass = getattr(importlib.import_module(module), cls)
        for doc in data.function_docs(backend):
            params = inspect.signature(getattr(klass, doc["name"])).parameters
            names[doc["name"]] = tuple(p for p in params if p != "self")
    return names


def parse_call(source: str) -> ToolCall:
    """``"mv(source='a', destination='b')"`` -> ``ToolCall("mv", {...})``; literals only, never evaluated."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise GroundTruthError(f"not a python call: {source!r} ({exc.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise GroundTruthError(f"not a plain function call: {source!r}")
    name = node.func.id
    try:
        arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
        positional = [ast.literal_eval(arg) for arg in node.args]
    except ValueError:
        raise GroundTruthError(f"arguments are not literals: {source!r}") from None
    if positional:
        params = _signatures().get(name)
        if params is None or len(positional) > len(params):
            raise GroundTruthError(f"cannot name the positional arguments of {source!r}")
        arguments = {**dict(zip(params, positional)), **arguments}
    return ToolCall(name, arguments)


def _initial_state(entry: dict[str, Any], long_context: bool) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for backend in entry["involved_classes"]:
        if data.is_stateless(backend):
            state[data.class_path(backend)] = None
            continue
        config = dict(entry["initial_config"].get(backend, {}))
        if long_context:
            config[LONG_CONTEXT_KEY] = True
        state[data.class_path(backend)] = config
    return state


def task_from_entry(entry: dict[str, Any], ground_truth: list[list[str]], category: str) -> Task:
    """One BFCL entry (and its ground truth) as a ``Task``."""
    holdout = {int(k): tuple(v) for k, v in entry.get("missed_function", {}).items()}
    withheld = {name for names in holdout.values() for name in names}
    docs = [doc for backend in entry["involved_classes"] for doc in data.function_docs(backend)]
    tools = tuple(doc["name"] for doc in docs if doc["name"] not in withheld)
    if len(entry["question"]) != len(ground_truth):
        raise GroundTruthError(f"{entry['id']}: {len(entry['question'])} turns but {len(ground_truth)} answers")
    turns = []
    for index, (messages, calls) in enumerate(zip(entry["question"], ground_truth)):
        if index in holdout:
            user = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
        else:
            user = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
        turns.append(Turn(
            user=user,
            ground_truth=tuple(parse_call(c) for c in calls),
            expects_abstention=category == "miss_func" and not calls,
            add_tools=holdout.get(index, ()),
        ))
    return Task(
        id=entry["id"],
        domain=DOMAIN,
        category=category,
        initial_state=_initial_state(entry, long_context=category == "long_context"),
        turns=tuple(turns),
        tools=tools,
        metadata={
            "checker": CHECKER,
            "bfcl_ground_truth": ground_truth,
            "involved_classes": list(entry["involved_classes"]),
            "initial_config": entry["initial_config"],
            "missed_function": {str(k): list(v) for k, v in holdout.items()},
            ADDED_DESCRIPTIONS: {doc["name"]: doc["description"] for doc in docs if doc["name"] in withheld},
        },
    )


@cache
def load_category(category: str) -> tuple[Task, ...]:
    """The 200 tasks of one category, in BFCL's order."""
    gt = data.answers(category)
    return tuple(task_from_entry(e, gt[e["id"]], category) for e in data.entries(category))


def load_all() -> tuple[Task, ...]:
    """All 800 tasks, category by category."""
    return tuple(t for c in data.CATEGORIES for t in load_category(c))
