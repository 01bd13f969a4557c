"""BFCL's conversation rules (``BFCL``), as its multi-turn inference loop and checker apply them.

- Decoding: BFCL's Hermes/Qwen handler (``seal_envs.bfcl.decoding``), whatever ``tool_format`` is asked for: an
  env with another format refuses to start.
- Reachable functions: BFCL evaluates ``name(arg=repr(value), ...)`` after prefixing every public method name of
  the entry's involved classes with its instance, so any such method runs, offered or not (a miss_func function
  called before its turn, too). Anything else runs nothing and yields the text of the exception Python's
  ``eval`` would raise (an unknown name, a syntax error, a refused name such as ``exit``).
- Results: a tool's return value as BFCL words it (``result_text`` of the tool server: strings as they are, dicts
  as JSON if possible, else ``str()``, so mpmath numbers keep their full value), errors as
  ``Error during execution: <message>``; these texts are also what the verifier compares, as BFCL's checker does.
- Tools: BFCL's schemas; a function added at a miss_func holdout turn keeps its doc's own description (BFCL adds
  its "Python 3 syntax" hint only to the functions offered from the start).

Not reproduced, on purpose: a call naming a Python builtin (``print``, ``open``) runs nothing here, where BFCL's
``eval`` runs it (its tool message differs, not the verdict: builtins cannot reach the backends); and BFCL's
prefixing also rewrites ``method(`` inside string arguments, with an instance name that depends on the model's
name (and differs between its own inference and its checker), while SEAL passes arguments unchanged.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from seal_envs.bfcl.checker import call_string
from seal_envs.bfcl.decoding import decode
from seal_envs.interface import InterfaceState
from seal_envs.formats import ParseLimits, ParsedAction, ToolFormat
from seal_envs.protocol import Protocol
from seal_envs.sandbox.base import CallResult
from seal_envs.spec.loader import ToolSpec
from seal_envs.task import Task, ToolCall

REFUSED_NAMES = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
"""Names BFCL's executor refuses to evaluate ("Function call <name> is not allowed.")."""
ADDED_DESCRIPTIONS = "bfcl_added_descriptions"
"""``Task.metadata`` key: name -> description of the functions a miss_func task adds later."""


@cache
def method_owners(involved: tuple[str, ...]) -> dict[str, str]:
    """Public method name -> the involved BFCL class that runs it (a later class wins, as in BFCL)."""
    owners: dict[str, str] = {}
    for backend in involved:
        instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[backend]), backend)()
        owners.update((name, backend) for name, _ in inspect.getmembers(instance, inspect.ismethod)
                      if not name.startswith("_"))
    return owners


def _defined(name: str) -> bool:
    """Whether ``name`` means something where BFCL evaluates calls (its module's globals and the builtins)."""
    return name in vars(builtins) or name in vars(multi_turn_utils)


def _first_name(nodes: Sequence[ast.AST]) -> str | None:
    names = [n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)]
    return min(names, key=lambda n: n.col_offset).id if names else None


def resolve_method(call: ToolCall, involved: Sequence[str]) -> str | Exception:
    """The method BFCL's executor runs for ``call``, or the exception it raises instead (nothing runs)."""
    owners = method_owners(tuple(involved))
    source = multi_turn_utils._process_method_calls(call_string(call), owners)
    head = source.split("(")[0]
    head = head.split(".")[1] if "." in head else head
    if head in REFUSED_NAMES:
        return Exception(f"Function call {head} is not allowed.")
    try:
        body = compile(source, "<string>", "eval", ast.PyCF_ONLY_AST).body
    except (SyntaxError, ValueError) as exc:
        return exc
    if not isinstance(body, ast.Call):
        return Exception(f"{call.name!r} is not a call BFCL could make")
    func = body.func
    # the one shape that runs a method: <instance>.<method>(...), the instance put there by BFCL's prefixing
    runs = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and owners.get(func.attr) == func.value.id)
    root = func
    while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
        root = root.func if isinstance(root, ast.Call) else root.value
    if not runs and isinstance(root, ast.Name) and not _defined(root.id):
        return NameError(f"name '{root.id}' is not defined")
    undefined = _first_name([kw.value for kw in body.keywords])  # nan/inf arguments: repr() is not a literal
    if undefined is not None:
        return NameError(f"name '{undefined}' is not defined")
    if runs:
        return func.attr
    if isinstance(func, ast.Constant):
        return TypeError(f"'{type(func.value).__name__}' object is not callable")
    return Exception(f"{call.name!r} names Python itself, which SEAL does not evaluate")


class BFCLProtocol(Protocol):
    """BFCL's decoding, reachable functions, result wording and tool schemas (see the module docstring)."""

    name = "bfcl"
    decodes = "hermes"  # BFCL's own Hermes/Qwen handler, so that scores stay BFCL-exact
    answers_malformed_calls = False  # BFCL's inference loop ends the turn on a message it cannot decode

    def decode(self, action: str, limits: ParseLimits, tool_format: ToolFormat) -> ParsedAction:
        return decode(action, limits)

    def resolve(self, call: ToolCall, task: Task, available: Sequence[str],
                tools: Mapping[str, ToolSpec]) -> ToolSpec | str:
        method = resolve_method(call, task.metadata["involved_classes"])
        return tools[method] if isinstance(method, str) else str(method)

    def render(self, result: CallResult) -> str:
        return result.text if result.ok else self.render_error(str(result.error))

    def render_error(self, message: str) -> str:
        return f"Error during execution: {message}"

    def output(self, result: CallResult) -> str:
        return self.render(result)

    def tool_schema(self, tool: ToolSpec, task: Task, interface: InterfaceState) -> dict[str, Any]:
        schema = super().tool_schema(tool, task, interface)
        added = task.metadata.get(ADDED_DESCRIPTIONS, {})
        if tool.name in added:
            schema["function"] = {**schema["function"], "description": added[tool.name]}
        return schema


BFCL = BFCLProtocol()
