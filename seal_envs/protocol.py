"""A benchmark's conversation rules: how the env decodes an action, finds what a call runs and words results.

``ToolUseEnv`` plays every domain by one ``Protocol``. The default is SEAL's own: the tolerant parser of the
env's tool format (``seal_envs.formats``), only the offered tools callable, results as JSON. A benchmark whose scores must be
reproduced exactly brings its own (``seal_envs.bfcl.protocol``), so that the env executes, shows and compares
exactly what the benchmark's own harness would; the protocol never depends on the mode or the interface cues.
A protocol whose decoding is the benchmark's own names that format (``decodes``): its decoding wins, and an env
asked for another tool format refuses to start rather than score every call as missing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from seal_envs.interface import InterfaceState, render_tool
from seal_envs.formats import ParseLimits, ParsedAction, ToolFormat
from seal_envs.sandbox.base import CallResult
from seal_envs.spec.loader import ToolSpec
from seal_envs.task import Task, ToolCall


class Protocol:
    """SEAL's own rules; subclasses override what their benchmark does differently."""

    name = "seal"
    decodes: str | None = None  # the one tool format this protocol decodes; None: the env's own
    # a message with a malformed call block: answered with a parse error (the turn stays open), or taken as the
    # turn's final answer. The rule of the protocol in every mode; the training interface only adds hint text.
    answers_malformed_calls: bool = True

    def decode(self, action: str, limits: ParseLimits, tool_format: ToolFormat) -> ParsedAction:
        """The calls the env executes from one assistant message (and the blocks it could not use)."""
        return tool_format.parse(action, limits)

    def resolve(self, call: ToolCall, task: Task, available: Sequence[str],
                tools: Mapping[str, ToolSpec]) -> ToolSpec | str:
        """The tool that runs ``call``, or the error message when nothing runs."""
        tool = tools.get(call.name) if call.name in available else None
        return tool if tool is not None else f"UnknownFunction: no function named {call.name!r} is available"

    def render(self, result: CallResult) -> str:
        """A call's result as the tool message the policy reads."""
        return result.render()

    def render_error(self, message: str) -> str:
        """The tool message for a call that ran nothing (``resolve`` gave ``message``)."""
        return json.dumps({"error": message})

    def output(self, result: CallResult) -> str:
        """The comparable form of a result that the verifier matches against the ground truth's outputs."""
        if result.ok:
            return json.dumps(result.output, sort_keys=True)
        return json.dumps({"error": f"{result.error_type}: {result.error}"})

    def tool_schema(self, tool: ToolSpec, task: Task, interface: InterfaceState) -> dict[str, Any]:
        """A tool as the policy sees it in ``tools=`` for this task."""
        return render_tool(tool, interface)


NATIVE = Protocol()
