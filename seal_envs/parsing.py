"""The one tool-call parser, shared by training, evaluation and the diagnosis.

Format: Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several per message.
Tolerates whitespace, code fences inside the tags, single-quoted or double-encoded arguments and a
missing final closing tag; anything else becomes a parse error the diagnosis can label, never an exception.
The work one message costs is bounded (``ParseLimits``): parsing is linear in the message, and blocks past
the size or count caps are rejected without being parsed.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from seal_envs.task import ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE_OPEN = re.compile(r"```[a-zA-Z]*")
FENCE = "```"


@dataclass(frozen=True)
class ParseLimits:
    """Bounds on what one assistant message may cost the caller (a policy can emit anything)."""

    max_calls: int = 64  # <tool_call> blocks per message; the rest become one parse error, unexecuted
    max_call_chars: int = 1 << 16  # characters of one block (its arguments included); longer ones are not parsed
    max_literal_chars: int = 1 << 13  # Python-literal fallback (single quotes): Python's parser is superlinear
    pattern_timeout_s: float = 0.1  # matching one argument against its schema's pattern (see spec.patterns)


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


def _load_object(text: str, limits: ParseLimits) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if len(text) > limits.max_literal_chars:
            raise ValueError("too long for a Python literal") from None
        value = ast.literal_eval(text)  # python-style dicts with single quotes, True/None
        if not isinstance(value, dict):
            raise ValueError("not an object") from None
        try:  # only what JSON can say: no sets, bytes, complex numbers or Ellipsis
            return json.loads(json.dumps(value))
        except (TypeError, ValueError):
            raise ValueError("not a JSON value") from None


def _strip_fence(text: str) -> str:
    """The text without surrounding whitespace and a Markdown code fence (linear: no backtracking regex)."""
    text = text.strip()
    if text.startswith(FENCE):
        text = text[_FENCE_OPEN.match(text).end():]
    if text.endswith(FENCE):
        text = text[: -len(FENCE)]
    return text.strip()


def _parse_block(raw: str, limits: ParseLimits) -> ToolCall | ParseError:
    if len(raw) > limits.max_call_chars:
        return ParseError(raw[:200], f"<tool_call> block of {len(raw)} characters; at most {limits.max_call_chars}")
    body = _strip_fence(raw)
    if not body:
        return ParseError(raw, "empty <tool_call> block")
    try:
        obj = _load_object(body, limits)
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
            arguments = _load_object(arguments, limits) if arguments.strip() else {}
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return ParseError(raw, '"arguments" is a string that is not a JSON object')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParseError(raw, '"arguments" must be a JSON object')
    return ToolCall(name=name, arguments=arguments)


def parse_tool_calls(text: str, limits: ParseLimits = ParseLimits()) -> ParsedAction:
    """Parse an assistant message. Never raises."""
    if not isinstance(text, str):
        return ParsedAction("", (), (ParseError(repr(text)[:200], "action must be a string"),))
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    for count, match in enumerate(_BLOCK.finditer(text)):
        if count == limits.max_calls:
            errors.append(ParseError(match.group(0)[:200], f"more than {limits.max_calls} tool calls in one "
                                     "message; the rest were not executed"))
            break
        parsed = _parse_block(match.group(1), limits)
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    content = _BLOCK.sub("", text).replace("</tool_call>", "").strip()
    return ParsedAction(content=content, calls=tuple(calls), errors=tuple(errors))


def format_tool_call(call: ToolCall) -> str:
    """Render a call in the format ``parse_tool_calls`` reads (used by scripted policies and hints)."""
    return f"<tool_call>\n{json.dumps(call.to_json())}\n</tool_call>"
