"""Tool-call formats (seal_envs.formats): one implementation per format for the env, policies, agent loop and
warm start; the default (Hermes) byte-for-byte what it was before formats existed."""

from __future__ import annotations

import hashlib
import warnings

import gymnasium as gym
import pytest

from seal_envs.formats import ParseLimits, ToolFormat, get_tool_format, register_tool_format, tool_format_names
from seal_envs.formats.mistral import MistralFormat
from seal_envs.task import ToolCall

FORMATS = ("hermes", "mistral", "llama3_json")
CALLS = (ToolCall("get_order", {"order_id": "o-1", "note": "é \"quoted\" 'single'", "n": [1, 2.5, None, True]}),
         ToolCall("list_orders", {}))

MALFORMED = {
    "hermes": ["<tool_call>not json</tool_call>", '<tool_call>{"arguments": {}}</tool_call>', "<tool_call></tool_call>"],
    "mistral": ["[TOOL_CALLS]not json", '[TOOL_CALLS][{"arguments": {}}]', "[TOOL_CALLS][]", "[TOOL_CALLS]",
                "[TOOL_CALLS]42", '[TOOL_CALLS][{"name": "a", "arguments": [1]}]'],
    "llama3_json": ['{"name": "a", "parameters": [1]}', '{"parameters": {}}', "{broken",
                    '{"name": "a", "parameters": {}} and then text', "<|python_tag|>nonsense", "<|python_tag|>"],
}


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("calls", [CALLS[:1], CALLS])
def test_round_trip(name, calls):
    fmt = get_tool_format(name)
    parsed = fmt.parse(fmt.format_calls(calls))
    assert parsed.calls == calls and not parsed.errors and parsed.content == ""


@pytest.mark.parametrize("name", FORMATS)
def test_malformed_calls_are_reported_never_dropped(name):
    fmt = get_tool_format(name)
    for text in MALFORMED[name]:
        parsed = fmt.parse(text)
        assert parsed.errors, (name, text, parsed)  # a decodable call before the garbage still runs


@pytest.mark.parametrize("name", FORMATS)
def test_plain_answer_garbage_and_limits(name):
    fmt = get_tool_format(name)
    plain = fmt.parse("The order ships tomorrow.")
    assert plain.content == "The order ships tomorrow." and not plain.calls and not plain.errors
    for garbage in (None, 42):
        parsed = fmt.parse(garbage)
        assert not parsed.calls and [e.reason for e in parsed.errors] == ["action must be a string"]
    own_marker = {"hermes": "<tool_call>" * 1000, "mistral": "[TOOL_CALLS]" * 1000, "llama3_json": "{" * 5000}[name]
    for garbage in ("{" * 5000, "[TOOL_CALLS]" * 1000, "<tool_call>" * 1000, "\x00\udcff"):
        parsed = fmt.parse(garbage)
        assert not parsed.calls and len(parsed.errors) <= ParseLimits().max_calls + 1, (garbage[:20], parsed.errors)
        if garbage == own_marker:  # this format's call syntax, broken: parse errors, no answer text
            assert parsed.errors and parsed.content == ""
        else:  # someone else's markers or noise: the plain answer, unchanged
            assert not parsed.errors and parsed.content == garbage
    limits = ParseLimits(max_calls=3)
    parsed = fmt.parse(fmt.format_calls([ToolCall("a", {"i": i}) for i in range(5)]), limits)
    assert len(parsed.calls) == 3 and "more than 3 tool calls" in parsed.errors[-1].reason


def test_text_beside_calls_is_the_answer():
    assert get_tool_format("mistral").parse('On it. [TOOL_CALLS][{"name": "a", "arguments": {}}]').content == "On it."
    tagged = get_tool_format("llama3_json").parse('Sure.<|python_tag|>{"name": "a", "parameters": {"x": 1}}')
    assert tagged.content == "Sure." and tagged.calls == (ToolCall("a", {"x": 1}),)
    fenced = get_tool_format("llama3_json").parse('```json\n{"name": "a", "parameters": {}}\n```')
    assert fenced.calls == (ToolCall("a", {}),)


def test_registry_and_unknown_name():
    with pytest.raises(ValueError, match="unknown tool format 'nope'; known: hermes, mistral, llama3_json"):
        get_tool_format("nope")
    with pytest.raises(TypeError, match="ToolFormat"):
        register_tool_format("bad", object())

    class Bracketed(MistralFormat):  # a user's own format: Mistral's syntax under another marker
        name = "bracketed"

    register_tool_format("bracketed", Bracketed())
    assert "bracketed" in tool_format_names() and isinstance(get_tool_format("bracketed"), ToolFormat)
    env = gym.make("seal/Shop-v0", mode="eval", sandbox="inprocess", tool_format="bracketed")
    assert env.unwrapped.tool_format.name == "bracketed"
    env.close()
    with pytest.raises(ValueError, match="unknown tool format"):
        gym.make("seal/Shop-v0", sandbox="inprocess", tool_format="nope")


# ------------------------------------------------------------------ hermes: unchanged

HERMES_TEMPLATE_SHA256 = "b98cfd931f27168e75f86ac4b0fe611468ccf71dac336f854133fd491597c6d1"
# render_chat of the conversation below before formats existed (seal_envs.tool_template at 3a23293)
HERMES_RENDERED = (
    '<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n'
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{"type":"function",'
    '"function":{"name":"get_order","description":"Get an order (\'quoted\') é","parameters":{"type":"object",'
    '"properties":{"order_id":{"type":"string"}},"required":["order_id"]}}}\n</tools>\n\nFor each function call, '
    'return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n'
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n'
    'Where is o-1?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "get_order", "arguments": '
    '{"order_id": "o-1"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{"status": "shipped"}\n'
    '</tool_response>\n<tool_response>\n{"x": 1}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<tool_call>\n'
    '{"name": "get_order", "arguments": {"order_id": "o-2"}}\n</tool_call><|im_end|>\n<|im_start|>user\n'
    '<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\nShipped.<|im_end|>\n<|im_start|>user\n'
    'thanks<|im_end|>\n<|im_start|>assistant\n')
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Get an order ('quoted') é",
          "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]


def _conversation(call_text: str) -> list[dict]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is o-1?"},
            {"role": "assistant", "content": call_text},
            {"role": "tool", "content": '{"status": "shipped"}'}, {"role": "tool", "content": '{"x": 1}'},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_order", "arguments": {"order_id": "o-2"}}}]},
            {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "Shipped."},
            {"role": "user", "content": "thanks"}]


def test_hermes_is_unchanged():
    from seal_envs.parsing import format_tool_call
    from seal_envs.tool_template import HERMES_TOOL_TEMPLATE, render_chat

    assert hashlib.sha256(HERMES_TOOL_TEMPLATE.encode()).hexdigest() == HERMES_TEMPLATE_SHA256
    call = ToolCall("get_order", {"order_id": "o-1"})
    assert render_chat(_conversation(format_tool_call(call)), TOOLS, True) == HERMES_RENDERED
    assert format_tool_call(ToolCall("a", {"x": [1, 2], "s": 'é"q'})) == \
        '<tool_call>\n{"name": "a", "arguments": {"x": [1, 2], "s": "\\u00e9\\"q"}}\n</tool_call>'
    assert get_tool_format("hermes").format_calls(CALLS[:1] * 2) == "\n".join([format_tool_call(CALLS[0])] * 2)


@pytest.mark.parametrize("name", FORMATS)
def test_structured_calls_render_as_the_format_writes_them(name):
    """A message's structured tool_calls and the same calls written as text render to the same prompt."""
    from seal_envs.tool_template import render_chat

    fmt = get_tool_format(name)
    ascii_calls = [ToolCall("get_order", {"order_id": "o-1", "n": [1, None]}), ToolCall("list_orders", {})]
    calls = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in ascii_calls]
    structured = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    as_text = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": fmt.format_calls(ascii_calls)}]
    assert render_chat(structured, TOOLS, tool_format=name) == render_chat(as_text, TOOLS, tool_format=name)


# ------------------------------------------------------------------ the env and its users, per format

@pytest.mark.parametrize("name", FORMATS)
def test_replay_of_ground_truth_passes_in_each_format(name):
    from seal_envs.evaluation.policies import ReplayPolicy
    from seal_envs.evaluation.runner import run_episode

    env = gym.make("seal/Shop-v0", mode="eval", sandbox="inprocess", tool_format=name)
    try:
        tasks = [t for t in env.unwrapped.tasks if t.id in ("shop_base_001", "shop_miss_func_001")]
        for task in tasks:
            record = run_episode(env, ReplayPolicy(tool_format=name), task)
            assert record.reward == 1.0 and set(record.labels) <= {"pass", "correct_abstention"}, record.labels
        # another format's calls are plain text here: no call runs and the turn is not passed
        other = "mistral" if name != "mistral" else "hermes"
        record = run_episode(env, ReplayPolicy(tool_format=other), tasks[0])
        assert record.reward == 0.0 and not any(record.calls[0])
    finally:
        env.close()


def test_parse_error_hint_names_the_format():
    from seal_envs.interface import InterfaceState

    env = gym.make("seal/Shop-v0", mode="train", sandbox="inprocess", tool_format="mistral",
                   interface=InterfaceState(error_hints=True))
    try:
        env.reset(options={"task_id": "shop_base_001"})
        obs, *_ = env.step("[TOOL_CALLS]not json")
        assert "[TOOL_CALLS][{" in obs[0]["content"] and "<tool_call>" not in obs[0]["content"]
    finally:
        env.close()


def test_bfcl_decoding_wins():
    from seal_envs.bfcl import make_env

    with pytest.raises(ValueError, match="use tool_format='hermes'"):
        make_env(split="eval", mode="eval", sandbox="inprocess", tool_format="mistral")


def test_agent_loop_and_warm_start_render_a_non_default_format(smollm2_folder):
    """On SmolLM2's real tokenizer (its saved template is SEAL's Hermes one): no generation runs. The agent loop
    itself renders a non-default format in tests/test_agent_loop.py."""
    from transformers import AutoTokenizer

    from seal_envs.tool_template import ensure_tool_template, tool_chat_template
    from seal_trainer import warm_start as sft
    from seal_trainer.agent_loop import _new_tools_message
    from seal_trainer.envpool import EnvSpec

    tok = AutoTokenizer.from_pretrained(smollm2_folder)
    assert tok.chat_template == tool_chat_template("hermes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SEAL's own template of another format is swapped without a warning
        assert ensure_tool_template(tok, "SmolLM2", "mistral") is True
    assert ensure_tool_template(tok, "SmolLM2", "mistral") is False and tok.chat_template == tool_chat_template("mistral")

    tasks = [t for t in gym.make("seal/Shop-v0", sandbox="inprocess").unwrapped.tasks if t.id == "shop_miss_func_001"]
    demo = sft.record_demonstrations(tasks, tool_format="mistral")[0]
    assert demo.reward == 1.0
    examples = sft.render_examples(tok, demo)
    trained = "".join(sft.supervised_text(tok, e) for e in examples)
    assert "[TOOL_CALLS][{" in trained and "<tool_call>" not in trained
    masked = tok.decode([t for e in examples for t, l in zip(e["input_ids"], e["labels"]) if l == -100])
    assert "[AVAILABLE_TOOLS]" in masked and "[TOOL_RESULTS]" in masked

    added = _new_tools_message([], TOOLS, get_tool_format("mistral"))
    assert added["content"].startswith("New functions are now available:\n[AVAILABLE_TOOLS]\n")
    env = EnvSpec(domain="shop", mode="eval", tool_format="llama3_json").make()
    assert env.unwrapped.tool_format.name == "llama3_json"
    env.close()
