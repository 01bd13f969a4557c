"""Hermes/Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several per message (the default).

Tolerates whitespace, code fences inside the tags, single-quoted or double-encoded arguments and a missing
final closing tag; anything else inside the tags becomes a parse error. Blocks past the size or count caps of
``ParseLimits`` are rejected without being parsed, so parsing is linear in the message. Its tool template is
the one Qwen2.5 and Hermes models were trained on: tools in ``<tools></tools>``, results as ``<tool_response>``
blocks in a user turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from seal_envs.formats.base import (
    NOT_A_STRING, PARSE_FAILURES, ParseError, ParseLimits, ParsedAction, TemplateParts, ToolFormat, call_from_object,
    load_object, strip_fence, too_long, too_many,
)
from seal_envs.task import ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def _parse_block(raw: str, limits: ParseLimits) -> ToolCall | ParseError:
    if len(raw) > limits.max_call_chars:
        return too_long(raw, len(raw), limits.max_call_chars, "<tool_call> block")
    body = strip_fence(raw)
    if not body:
        return ParseError(raw, "empty <tool_call> block")
    try:
        obj = load_object(body, limits)
    except PARSE_FAILURES:
        return ParseError(raw, 'not a JSON object; expected {"name": "<tool>", "arguments": {...}}')
    return call_from_object(obj, raw, limits)


class HermesFormat(ToolFormat):
    name = "hermes"
    example = '<tool_call>\n{"name": "<function name>", "arguments": {<arguments as JSON>}}\n</tool_call>'
    template = TemplateParts(
        offer_head="# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n",
        tools_open="<tools>", tools_close="</tools>",
        offer_tail="\n\nFor each function call, return a json object with function name and arguments within "
                   "<tool_call></tool_call> XML tags:\n<tool_call>\n"
                   '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>',
        calls_open="\n", calls_sep="\n", calls_close="",
        call_open='<tool_call>\n{"name": "', call_mid='", "arguments": ', call_close="}\n</tool_call>",
        result_role="user", result_open="\n<tool_response>\n", result_close="\n</tool_response>",
    )

    def parse(self, text: str, limits: ParseLimits = ParseLimits()) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction("", (), (ParseError(repr(text)[:200], NOT_A_STRING),))
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for count, match in enumerate(_BLOCK.finditer(text)):
            if count == limits.max_calls:
                errors.append(too_many(match.group(0), limits))
                break
            parsed = _parse_block(match.group(1), limits)
            (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
        content = _BLOCK.sub("", text).replace("</tool_call>", "").strip()
        return ParsedAction(content=content, calls=tuple(calls), errors=tuple(errors))

    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(f"<tool_call>\n{json.dumps(c.to_json())}\n</tool_call>" for c in calls)


HERMES = HermesFormat()
