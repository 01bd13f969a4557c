"""The evolvable interface: cue selection by failure type, rendering, serialisation."""

from seal_envs.diagnosis import CallRecord, Label
from seal_envs.interface import (
    GUIDELINES, SCHEMA_INSTRUCTION, EvolutionConfig, InterfaceState, evolve, failure_profile,
    render_error_hint, render_system_prompt, render_tool,
)
from seal_envs.spec.loader import ToolSpec
from seal_envs.task import ToolCall

TOOL = ToolSpec(
    name="checkout", description="Pay for the cart.", implementation="m:C.checkout",
    parameters={"type": "object", "required": ["speed"], "properties": {
        "speed": {"type": "string", "enum": ["standard", "express"], "description": "Shipping speed."},
        "note": {"type": "string"}}},
)


def test_original_interface_renders_the_spec_unchanged():
    state = InterfaceState()
    assert state.is_original
    assert render_tool(TOOL, state) == TOOL.openai_schema()
    assert render_system_prompt("Base.", state) == "Base." and render_system_prompt(None, state) is None
    assert render_error_hint(CallRecord(1, "execution_error", ToolCall("checkout", {})), ["checkout"], state) is None


def test_schema_failures_turn_on_schema_cues_and_error_hints():
    state = evolve(InterfaceState(), {"argument_mismatch": 5, "pass": 15})
    assert state.schema_cues and state.error_hints and state.guidelines == () and state.version == 1
    props = render_tool(TOOL, state)["function"]["parameters"]["properties"]
    assert props["speed"]["description"] == "[required] Shipping speed. Allowed values: standard, express."
    assert props["note"]["description"] == ""
    assert SCHEMA_INSTRUCTION in render_system_prompt(None, state)
    assert TOOL.parameters["properties"]["speed"]["description"] == "Shipping speed."  # the spec is untouched


def test_guidelines_follow_the_dominant_behavioural_failures():
    state = evolve(InterfaceState(), {"spurious_tool_call": 6, "state_mismatch": 3, "response_mismatch": 1, "pass": 50})
    assert state.guidelines == ("spurious_tool_call", "state_mismatch")  # max_guidelines=2, by share
    assert not state.schema_cues and not state.error_hints
    prompt = render_system_prompt("Base.", state)
    assert GUIDELINES[Label.SPURIOUS_TOOL_CALL] in prompt and GUIDELINES[Label.STATE_MISMATCH] in prompt
    assert GUIDELINES[Label.RESPONSE_MISMATCH] not in prompt


def test_non_agent_faults_are_left_out_of_the_profile():
    assert failure_profile(["infrastructure_error", "task_error", Label.PASS]) == {"pass": 1}
    assert evolve(InterfaceState(), {"infrastructure_error": 100}).is_original


def test_rare_failures_below_threshold_do_not_switch_cues():
    state = evolve(InterfaceState(config=EvolutionConfig(min_share=0.2)), {"argument_mismatch": 1, "pass": 9})
    assert state.is_original and state.version == 1


def test_state_round_trips_through_json():
    state = evolve(InterfaceState(), {"missing_tool_call": 2, "argument_mismatch": 1})
    assert InterfaceState.from_json(state.dumps()) == state
    assert InterfaceState.from_json(state.to_json()) == state


def test_hints_name_the_violated_constraint():
    state = InterfaceState(error_hints=True)
    record = CallRecord(1, "invalid_arguments", ToolCall("checkout", {"speedy": 1}), violations=(
        {"kind": "missing", "argument": "speed"}, {"kind": "unknown", "argument": "speedy"}))
    hint = render_error_hint(record, ["checkout"], state)
    assert "required argument 'speed' is missing" in hint and "'speedy' is not accepted" in hint
    parse_hint = render_error_hint(CallRecord(1, "parse_error", error="bad"), ["checkout", "view_cart"], state)
    assert "<tool_call>" in parse_hint and "checkout, view_cart" in parse_hint and "plain text" in parse_hint
