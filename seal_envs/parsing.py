"""The one tool-call parser, shared by training, evaluation and the diagnosis.

Format: Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several per message.
Tolerates whitespace, code fences inside the tags, single-quoted or double-encoded arguments and a
missing final closing tag; anything else becomes a parse error the diagnosis can label, never an exception.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from seal_envs.task import ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


@dataclass(frozen=True)
class ParseError:
    raw: str
    reason: str


@dataclass(frozen=True)
class ParsedAction:
    """The policy's message split into its text answer, valid calls and malformed call blocks."""

    content: str
    calls: tuple[ToolCall, ...]
    errors: tuple[ParseError, ...]


def _load_object(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        value = ast.literal_eval(text)  # python-style dicts with single quotes, True/None
        if not isinstance(value, dict):
            raise ValueError("not an object") from None
        return value


def _parse_block(raw: str) -> ToolCall | ParseError:
    body = _FENCE.sub("", raw.strip()).strip()
    if not body:
        return ParseError(raw, "empty <tool_call> block")
    try:
        obj = _load_object(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ParseError(raw, 'not a JSON object; expected {"name": "<tool>", "arguments": {...}}')
    if not isinstance(obj, dict):
        return ParseError(raw, "tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParseError(raw, 'missing string field "name"')
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # double-encoded arguments, a common model habit
        try:
            arguments = _load_object(arguments) if arguments.strip() else {}
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return ParseError(raw, '"arguments" is a string that is not a JSON object')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParseError(raw, '"arguments" must be a JSON object')
    return ToolCall(name=name, arguments=arguments)


def parse_tool_calls(text: str) -> ParsedAction:
    """Parse an assistant message. Never raises."""
    if not isinstance(text, str):
        return ParsedAction("", (), (ParseError(repr(text)[:200], "action must be a string"),))
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    for match in _BLOCK.finditer(text):
        parsed = _parse_block(match.group(1))
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    content = _BLOCK.sub("", text).replace("</tool_call>", "").strip()
    return ParsedAction(content=content, calls=tuple(calls), errors=tuple(errors))


def format_tool_call(call: ToolCall) -> str:
    """Render a call in the format ``parse_tool_calls`` reads (used by scripted policies and hints)."""
    return f"<tool_call>\n{json.dumps(call.to_json())}\n</tool_call>"
