"""What a tool-call format is, and the call-reading rules every format shares.

A format (``ToolFormat``) is how one model family writes tool calls in its assistant text and reads tools and
results in its prompt: ``parse`` (text -> calls), ``format_calls`` (calls -> text), ``example`` (the one-line
shape quoted in recovery hints), ``announce_tools`` (tools added mid-episode) and ``template`` (the pieces of
SEAL's ChatML tool template for models whose own chat template drops ``tools=``, see
``seal_envs.tool_template``). Whatever the format, one message's parsing costs at most ``ParseLimits``, and a
call the format's syntax marks but that cannot be used is reported as a ``ParseError`` (for the diagnosis),
never dropped and never raised.
"""

from __future__ import annotations

import ast
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seal_envs.task import ToolCall

_FENCE_OPEN = re.compile(r"```[a-zA-Z]*")
FENCE = "```"


@dataclass(frozen=True)
class ParseLimits:
    """Bounds on what one assistant message may cost the caller (a policy can emit anything)."""

    max_calls: int = 64  # calls per message; the rest become one parse error, unexecuted
    max_call_chars: int = 1 << 16  # characters of one call (its arguments included); longer ones are not parsed
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


NOT_A_STRING = "action must be a string"
PARSE_FAILURES = (ValueError, SyntaxError, MemoryError, RecursionError)


def load_object(text: str, limits: ParseLimits, containers: tuple[type, ...] = (dict,)) -> Any:
    """JSON, or a Python literal of one of ``containers`` (single quotes, True/None) as JSON values; raises one of
    ``PARSE_FAILURES``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if len(text) > limits.max_literal_chars:
            raise ValueError("too long for a Python literal") from None
        value = ast.literal_eval(text)  # python-style dicts with single quotes, True/None
        if not isinstance(value, containers):
            raise ValueError("not an object") from None
        try:  # only what JSON can say: no sets, bytes, complex numbers or Ellipsis
            return json.loads(json.dumps(value))
        except (TypeError, ValueError):
            raise ValueError("not a JSON value") from None


def strip_fence(text: str) -> str:
    """The text without surrounding whitespace and a Markdown code fence (linear: no backtracking regex)."""
    text = text.strip()
    if text.startswith(FENCE):
        text = text[_FENCE_OPEN.match(text).end():]
    if text.endswith(FENCE):
        text = text[: -len(FENCE)]
    return text.strip()


def call_from_object(obj: Any, raw: str, limits: ParseLimits) -> ToolCall | ParseError:
    """One decoded call object as a ``ToolCall`` (arguments under ``"arguments"`` or ``"parameters"``)."""
    if not isinstance(obj, dict):
        return ParseError(raw, "tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParseError(raw, 'missing string field "name"')
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # double-encoded arguments, a common model habit
        try:
            arguments = load_object(arguments, limits) if arguments.strip() else {}
        except PARSE_FAILURES:
            return ParseError(raw, '"arguments" is a string that is not a JSON object')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParseError(raw, '"arguments" must be a JSON object')
    return ToolCall(name=name, arguments=arguments)


def too_many(raw: str, limits: ParseLimits) -> ParseError:
    return ParseError(raw[:200], f"more than {limits.max_calls} tool calls in one message; the rest were not executed")


def too_long(raw: str, size: int, limit: int, what: str) -> ParseError:
    return ParseError(raw[:200], f"{what} of {size} characters; at most {limit}")


@dataclass(frozen=True)
class TemplateParts:
    """A format's pieces of SEAL's ChatML tool template (plain text; ``seal_envs.tool_template`` assembles them).

    Tools are offered in the system message as ``offer_head`` + ``tools_open``, one compact JSON schema per line,
    ``tools_close`` + ``offer_tail`` (``announce_tools`` wraps tools added later in the same two markers).
    Structured ``tool_calls`` of an assistant message are written after its content as ``calls_open``, then per
    call ``call_open`` + name + ``call_mid`` + arguments as JSON + ``call_close``, ``calls_sep`` between calls,
    ``calls_close`` after the last: a newline, then the text ``format_calls`` writes. Consecutive tool messages form one
    ``result_role`` turn, each result between ``result_open`` and ``result_close``.
    """

    offer_head: str
    tools_open: str
    tools_close: str
    offer_tail: str
    calls_open: str
    calls_sep: str
    calls_close: str
    call_open: str
    call_mid: str
    call_close: str
    result_role: str
    result_open: str
    result_close: str


class ToolFormat(ABC):
    """One model family's tool-call format (see the module docstring); register it with ``register_tool_format``."""

    name: str
    example: str  # the shape of one call, quoted in recovery hints
    template: TemplateParts

    @abstractmethod
    def parse(self, text: str, limits: ParseLimits = ParseLimits()) -> ParsedAction:
        """The calls in an assistant message, its text answer and the call blocks it could not use. Never raises."""

    @abstractmethod
    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        """``calls`` as one assistant message that ``parse`` reads back to the same calls."""

    def announce_tools(self, tools: Sequence[dict[str, Any]]) -> str:
        """A system message's text offering ``tools`` added mid-episode (the prompt's tool list is already fixed)."""
        body = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        lines = ["New functions are now available:", self.template.tools_open, body, self.template.tools_close]
        return "\n".join(line for line in lines if line)

    def __repr__(self) -> str:
        return f"<tool format {self.name!r}>"


__all__ = ["ParseError", "ParseLimits", "ParsedAction", "TemplateParts", "ToolFormat", "call_from_object",
           "load_object", "strip_fence"]
