"""Llama 3.1 JSON tool calling: the whole message is ``{"name": ..., "parameters": {...}}``.

A message that is (after an optional Markdown fence) a JSON object, or anything after ``<|python_tag|>``, is a
call attempt: one object, or several separated by ``;`` (as vLLM's ``llama3_json`` parser reads them); what does
not decode is a parse error. Any other message is a plain answer. Results come back in an ``ipython`` turn, as
in Llama 3.1's own chat template (here inside SEAL's ChatML tool template).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from seal_envs.formats.base import (
    NOT_A_STRING, PARSE_FAILURES, ParseError, ParseLimits, ParsedAction, TemplateParts, ToolFormat, call_from_object,
    load_object, strip_fence, too_long, too_many,
)
from seal_envs.task import ToolCall

PYTHON_TAG = "<|python_tag|>"
SEPARATOR = "; "
SHAPE = '{"name": "<tool>", "parameters": {...}}'
_DECODER = json.JSONDecoder()


class Llama3JsonFormat(ToolFormat):
    name = "llama3_json"
    example = '{"name": "<function name>", "parameters": {<arguments as JSON>}} (the whole message)'
    template = TemplateParts(
        offer_head="# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "The functions you can call, as JSON:",
        tools_open="", tools_close="",
        offer_tail="\nTo call a function, answer with nothing but a JSON object "
                   '{"name": <function-name>, "parameters": <args-json-object>}; separate several calls with "; ".',
        calls_open="\n", calls_sep=SEPARATOR, calls_close="",
        call_open='{"name": "', call_mid='", "parameters": ', call_close="}",
        result_role="ipython", result_open="\n", result_close="",
    )

    def parse(self, text: str, limits: ParseLimits = ParseLimits()) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction("", (), (ParseError(repr(text)[:200], NOT_A_STRING),))
        content, tagged, body = text.partition(PYTHON_TAG)
        if not tagged:
            body = strip_fence(text)
            if not body.startswith("{"):
                return ParsedAction(text.strip(), (), ())
            content = ""
        cap = limits.max_call_chars * limits.max_calls
        if len(body) > cap:
            return ParsedAction(content.strip(), (), (too_long(body, len(body), cap, "tool call message"),))
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for found in _objects(body, limits):
            if len(calls) + len(errors) == limits.max_calls:
                errors.append(too_many(body, limits))
                break
            (calls if isinstance(found, ToolCall) else errors).append(found)
        return ParsedAction(content.strip(), tuple(calls), tuple(errors))

    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        return SEPARATOR.join(json.dumps({"name": c.name, "parameters": c.arguments}) for c in calls)


def _objects(body: str, limits: ParseLimits):
    """The calls (or errors) of ``;``-separated objects; the first undecodable rest is one error, then stop."""
    pos = 0
    while True:
        while pos < len(body) and body[pos] in " \t\r\n;":
            pos += 1
        if pos == len(body):
            if not body.strip(" \t\r\n;"):
                yield ParseError(body, f"empty tool call; expected {SHAPE}")
            return
        try:
            obj, end = _DECODER.raw_decode(body, pos)
        except json.JSONDecodeError:
            rest = strip_fence(body[pos:])
            try:  # a single-quoted Python literal: only as the whole rest, Python's parser has no raw_decode
                obj, end = load_object(rest, limits), len(body)
            except PARSE_FAILURES:
                yield ParseError(rest[:200], f"not a JSON object; expected {SHAPE}")
                return
        if end - pos > limits.max_call_chars:
            yield too_long(body[pos:end], end - pos, limits.max_call_chars, "tool call")
        else:
            yield call_from_object(obj, body[pos:end][:200], limits)
        pos = end


LLAMA3_JSON = Llama3JsonFormat()
