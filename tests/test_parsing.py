"""The one tool-call parser: tolerant of model habits, never raising on garbage."""

import pytest

from seal_envs.parsing import format_tool_call, parse_tool_calls
from seal_envs.task import ToolCall


def test_several_calls_and_text():
    text = ('Let me check. <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
            '<tool_call>\n  {"name": "b", "arguments": {}}  \n</tool_call>')
    parsed = parse_tool_calls(text)
    assert parsed.calls == (ToolCall("a", {"x": 1}), ToolCall("b", {}))
    assert parsed.content == "Let me check."
    assert not parsed.errors


def test_code_fence_double_encoding_and_missing_close_tag():
    text = '<tool_call>```json\n{"name": "a", "arguments": "{\\"x\\": [1, 2]}"}\n```</tool_call><tool_call>{"name": "b", "arguments": {"y": null}}'
    assert parse_tool_calls(text).calls == (ToolCall("a", {"x": [1, 2]}), ToolCall("b", {"y": None}))


def test_python_style_dict_is_accepted():
    assert parse_tool_calls("<tool_call>{'name': 'a', 'arguments': {'flag': True}}</tool_call>").calls == (
        ToolCall("a", {"flag": True}),)


@pytest.mark.parametrize("block, reason", [
    ("", "empty"),
    ("not json at all", "not a JSON object"),
    ('["a"]', "must be a JSON object"),
    ('{"arguments": {}}', '"name"'),
    ('{"name": "a", "arguments": [1]}', '"arguments" must be a JSON object'),
    ('{"name": "a", "arguments": "nope"}', "string that is not a JSON object"),
])
def test_malformed_blocks_become_errors(block, reason):
    parsed = parse_tool_calls(f"<tool_call>{block}</tool_call>")
    assert not parsed.calls and len(parsed.errors) == 1 and reason in parsed.errors[0].reason


@pytest.mark.parametrize("garbage", [None, 42, "<tool_call>" * 1000, "\x00\udcff</tool_call>", "{" * 5000])
def test_garbage_never_raises(garbage):
    parse_tool_calls(garbage)


def test_plain_answer_has_no_calls():
    parsed = parse_tool_calls("The order ships tomorrow.")
    assert parsed.content == "The order ships tomorrow." and not parsed.calls and not parsed.errors


def test_format_round_trip():
    call = ToolCall("get_order", {"order_id": "o-1"})
    assert parse_tool_calls(format_tool_call(call)).calls == (call,)
