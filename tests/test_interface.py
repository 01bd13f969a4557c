"""The evolvable interface: cue selection by failure type, rendering, serialisation."""

import pytest

from seal_envs.diagnosis import CallRecord, Label, Tag
from seal_envs.interface import (
    GUIDELINES, SCHEMA_INSTRUCTION, EvolutionConfig, FailureProfile, InterfaceState, evolve, failure_profile,
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


def test_training_starts_with_the_schema_cues_of_the_reference_main_config():
    state = InterfaceState.initial()
    assert state.schema_cues and not state.error_hints and state.guidelines == ()
    props = render_tool(TOOL, state)["function"]["parameters"]["properties"]
    assert props["speed"]["description"] == "[required] Shipping speed. Allowed values: standard, express."
    assert props["note"]["description"] == ""
    assert SCHEMA_INSTRUCTION in render_system_prompt(None, state)
    assert TOOL.parameters["properties"]["speed"]["description"] == "Shipping speed."  # the spec is untouched
    assert evolve(state, {}).schema_cues  # "always": whatever the profile
    assert not InterfaceState.initial(EvolutionConfig(schema_cues="never")).schema_cues


def rollouts(*groups):
    """(tag, turns, reward) groups -> one rollout per turn, so that each tag's mean reward is its reward."""
    return FailureProfile.from_rollouts(([], [tag], reward) for tag, turns, reward in groups for _ in range(turns))


def test_guidelines_are_gated_as_the_reference_gates_them():
    profile = rollouts(("pass", 200, 1.0), ("correct_abstention", 50, 1.0),  # not failures: not in the shares
                       ("state_mismatch", 12, 0.0),      # share .24, pressure .24
                       ("spurious_tool_call", 10, 0.2),  # share .20, pressure .16
                       ("instance_mismatch", 9, 0.0),    # share .18, pressure .18
                       ("response_mismatch", 8, 0.1),    # share .16, pressure .144: a 4th line, cut by max 3
                       ("empty_turn_model_response", 7, 0.0),  # share .14 but count 7 < 8
                       ("gt_error", 40, 0.0))            # the task's fault: never counted
    state = evolve(InterfaceState(), profile)
    assert state.guidelines == ("state_mismatch", "instance_mismatch", "spurious_tool_call")
    prompt = render_system_prompt("Base.", state)
    assert all(GUIDELINES[Tag(t)] in prompt for t in state.guidelines)
    assert GUIDELINES[Tag.RESPONSE_MISMATCH] not in prompt
    solved = evolve(InterfaceState(), rollouts(("state_mismatch", 20, 0.75), ("spurious_tool_call", 20, 0.0)))
    assert solved.guidelines == ("spurious_tool_call",)  # mean reward 0.75 is not < 0.6
    rare = evolve(InterfaceState(), rollouts(("state_mismatch", 8, 0.0), ("spurious_tool_call", 80, 0.0)))
    assert rare.guidelines == ("spurious_tool_call",)  # share 8/88 < 0.10


def test_thresholds_are_configurable():
    profile = rollouts(("state_mismatch", 3, 0.0), ("response_mismatch", 2, 0.5))
    assert evolve(InterfaceState(), profile).guidelines == ()  # counts under 8
    loose = InterfaceState(config=EvolutionConfig(min_count=2, max_guidelines=1, max_reward=1.0))
    assert evolve(loose, profile).guidelines == ("state_mismatch",)


def test_error_hints_on_failure_of_the_error_labels():
    config = EvolutionConfig(error_hints="on_failure", schema_cues="on_failure")
    state = evolve(InterfaceState(config=config), {"argument_mismatch": 8, "state_mismatch": 2, "pass": 30})
    assert state.error_hints and state.schema_cues
    assert not evolve(InterfaceState(config=config), {"argument_mismatch": 7, "pass": 30}).error_hints  # count < 8
    with pytest.raises(ValueError, match="error_hints"):
        EvolutionConfig(error_hints="sometimes")


def test_non_agent_faults_are_left_out_of_the_profile():
    profile = failure_profile(["infrastructure_error", "task_error", Label.PASS])
    assert profile.counts() == {"pass": 1}
    assert evolve(InterfaceState(), {"infrastructure_error": 100}).guidelines == ()


def test_unknown_names_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown label or tag 'spurious'; valid: .*spurious_tool_call"):
        failure_profile({"spurious": 3})


def test_state_round_trips_through_json():
    state = evolve(InterfaceState.initial(), rollouts(("state_mismatch", 9, 0.0), ("pass", 3, 1.0)))
    assert state.guidelines == ("state_mismatch",)
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


# Found by mutation testing (benchmarks/mutation.py interface): each test below fails on a one-line break that the
# tests above let through.

def test_rendering_cues_leaves_the_spec_as_eval_envs_see_it():
    """Training and eval envs share ToolSpecs: an annotated schema must be a copy, never the spec itself."""
    original = TOOL.openai_schema()
    render_tool(TOOL, InterfaceState(schema_cues=True, config=EvolutionConfig(annotate_types=True)))
    assert TOOL.openai_schema() == original


def test_faults_that_are_not_the_agents_stay_out_of_the_profile():
    profile = FailureProfile.from_rollouts([(["infrastructure_error", "task_error", "state_mismatch"],
                                             ["infrastructure_error", "gt_error", "state_mismatch"], 0.0)])
    assert list(profile.labels) == ["state_mismatch"] and list(profile.tags) == ["state_mismatch"]


def _profile(tag: str, turns: int, others: int, reward: float) -> FailureProfile:
    """``turns`` turns tagged ``tag`` in rollouts of ``reward``, and ``others`` response_mismatch turns."""
    return FailureProfile.from_rollouts([([tag] * turns, [tag] * turns, reward),
                                         (["response_mismatch"] * others, ["response_mismatch"] * others, 0.0)])


@pytest.mark.parametrize("turns, others, reward, qualifies", [
    (8, 72, 0.0, True),    # share 8/80 = min_share, count = min_count: in
    (8, 73, 0.0, False),   # share just under 0.10
    (7, 0, 0.0, False),    # count under min_count
    (8, 0, 0.6, False),    # mean reward = max_reward: out (< 0.6 is needed)
])
def test_a_guideline_needs_share_count_and_reward_at_their_bounds(turns, others, reward, qualifies):
    state = evolve(InterfaceState(config=EvolutionConfig(max_guidelines=5)), _profile("spurious_tool_call", turns,
                                                                                      others, reward))
    assert ("spurious_tool_call" in state.guidelines) == qualifies
    assert state.config.max_guidelines == 5  # the config carries over to the evolved state


def test_guidelines_are_ordered_by_share_times_failure():
    """spurious: share .6, reward .5 -> .3; instance: share .4, reward 0 -> .4 first (the larger share second)."""
    profile = FailureProfile.from_rollouts([(["spurious_tool_call"] * 12, ["spurious_tool_call"] * 12, 0.5),
                                            (["instance_mismatch"] * 8, ["instance_mismatch"] * 8, 0.0)])
    assert evolve(InterfaceState(), profile).guidelines == ("instance_mismatch", "spurious_tool_call")
