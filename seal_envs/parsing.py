"""Parse and write tool calls in a named format (default Hermes), for callers that hold no ``ToolFormat``.

The formats themselves live in ``seal_envs.formats``; this module keeps the long-standing entry points, and
the result types, under one stable import.
"""

from __future__ import annotations

from seal_envs.formats import DEFAULT_TOOL_FORMAT, ParseError, ParseLimits, ParsedAction, ToolFormat, get_tool_format
from seal_envs.task import ToolCall


def parse_tool_calls(text: str, limits: ParseLimits = ParseLimits(),
                     tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> ParsedAction:
    """Parse an assistant message. Never raises."""
    return get_tool_format(tool_format).parse(text, limits)


def format_tool_call(call: ToolCall, tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> str:
    """Render a call in the format ``parse_tool_calls`` reads (used by scripted policies and hints)."""
    return get_tool_format(tool_format).format_calls([call])


__all__ = ["ParseError", "ParseLimits", "ParsedAction", "format_tool_call", "parse_tool_calls"]
