"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, the calls of a message as one JSON list.

The text before the first ``[TOOL_CALLS]`` is the answer; each ``[TOOL_CALLS]`` starts a block that runs to the
next one (or the end) and holds a list of call objects (a lone object is read as a list of one). A block that is
not a list of objects, and each unusable item of a list, is a parse error. Results come back as
``[TOOL_RESULTS]...[/TOOL_RESULTS]`` and tools are offered between ``[AVAILABLE_TOOLS]`` markers, as in
Mistral's own chat templates (here inside SEAL's ChatML tool template).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from seal_envs.formats.base import (
    NOT_A_STRING, PARSE_FAILURES, ParseError, ParseLimits, ParsedAction, TemplateParts, ToolFormat, call_from_object,
    load_object, strip_fence, too_long, too_many,
)
from seal_envs.task import ToolCall

MARKER = "[TOOL_CALLS]"
SHAPE = '[TOOL_CALLS][{"name": "<tool>", "arguments": {...}}]'


class MistralFormat(ToolFormat):
    name = "mistral"
    example = '[TOOL_CALLS][{"name": "<function name>", "arguments": {<arguments as JSON>}}]'
    template = TemplateParts(
        offer_head="# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "The functions you can call are listed as JSON between [AVAILABLE_TOOLS] and [/AVAILABLE_TOOLS]:\n",
        tools_open="[AVAILABLE_TOOLS]", tools_close="[/AVAILABLE_TOOLS]",
        offer_tail="\n\nTo call functions, write [TOOL_CALLS] followed by a JSON list with one object per call:\n"
                   '[TOOL_CALLS][{"name": <function-name>, "arguments": <args-json-object>}]',
        calls_open="\n[TOOL_CALLS][", calls_sep=", ", calls_close="]",
        call_open='{"name": "', call_mid='", "arguments": ', call_close="}",
        result_role="user", result_open="\n[TOOL_RESULTS]", result_close="[/TOOL_RESULTS]",
    )

    def parse(self, text: str, limits: ParseLimits = ParseLimits()) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction("", (), (ParseError(repr(text)[:200], NOT_A_STRING),))
        content, *blocks = text.split(MARKER)
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for raw in blocks:
            found = self._items(raw, limits)
            for entry in [found] if isinstance(found, ParseError) else found:
                if len(calls) + len(errors) == limits.max_calls:
                    errors.append(too_many(raw, limits))
                    return ParsedAction(content.strip(), tuple(calls), tuple(errors))
                parsed = entry if isinstance(entry, ParseError) else \
                    call_from_object(entry, json.dumps(entry, default=str)[:200], limits)
                (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
        return ParsedAction(content.strip(), tuple(calls), tuple(errors))

    @staticmethod
    def _items(raw: str, limits: ParseLimits) -> list | ParseError:
        """The call objects of one block (unvalidated), or the reason there are none."""
        cap = limits.max_call_chars * limits.max_calls
        if len(raw) > cap:
            return too_long(raw, len(raw), cap, f"{MARKER} block")
        body = strip_fence(raw)
        if not body:
            return ParseError(raw, f"empty {MARKER} block; expected {SHAPE}")
        try:
            value = load_object(body, limits, containers=(dict, list))
        except PARSE_FAILURES:
            return ParseError(raw[:200], f"not a JSON list of calls; expected {SHAPE}")
        if isinstance(value, dict):
            return [value]
        if not isinstance(value, list) or not value:
            return ParseError(raw[:200], f"not a non-empty JSON list of calls; expected {SHAPE}")
        return value

    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        return MARKER + json.dumps([c.to_json() for c in calls])


MISTRAL = MistralFormat()
