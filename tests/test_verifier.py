"""The verifier's parts one by one: the ground-truth replay, its cache, and the per-turn comparison (the env tests
check them together through whole episodes)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.sandbox import SandboxConfig
from seal_envs.sandbox.inprocess import InProcessSandbox
from seal_envs.task import ToolCall, Turn, load_tasks
from seal_envs.verifier import (
    MAX_DIFF_PATHS, ReferenceCache, TurnReference, episode_classes, judge_turn, replay_reference, state_diff,
    task_fingerprint,
)

TASKS = {t.id: t for t in load_tasks("shop")}
SHOP = "shop_api:ShopAPI"


@pytest.fixture(scope="module")
def shop():
    env = ToolUseEnv(domain="shop", sandbox="inprocess")
    box = InProcessSandbox(SandboxConfig(backend="inprocess"))
    yield env.tools, env.python_paths, env._code, box
    box.close()
    env.close()


def turn(ground_truth=(ToolCall("view_cart", {}),), required=()) -> Turn:
    return Turn(user="u", ground_truth=tuple(ground_truth), required_response=tuple(required))


def test_the_replay_records_each_turns_outputs_and_state(shop):
    tools, paths, code, box = shop
    task = TASKS["shop_base_001"]
    refs = replay_reference(task, box, tools, paths, code=code)
    assert len(refs) == len(task.turns) and all(r.judged for r in refs)
    assert [len(r.outputs) for r in refs] == [len(t.ground_truth) for t in task.turns]
    assert '"p-101"' in refs[0].outputs[0]  # the search found the earbuds
    assert refs[0].state[SHOP]["cart"] == [] and refs[1].state[SHOP]["cart"]  # turn 2 filled the cart
    assert '"ORD-1001"' in refs[2].outputs[0] and refs[2].state != refs[1].state


def test_the_replay_starts_from_the_tasks_initial_state(shop):
    tools, paths, code, box = shop
    task = TASKS["shop_base_001"]
    box.reset(episode_classes(task, tools), paths, code)
    box.call(tools["add_to_cart"].implementation, {"product_id": "p-101", "quantity": 5})  # an agent's leftovers
    assert replay_reference(task, box, tools, paths, code=code) == replay_reference(task, box, tools, paths, code=code)
    assert replay_reference(task, box, tools, paths, code=code)[0].state[SHOP]["cart"] == []


def test_bfcl_tasks_leave_turns_without_ground_truth_unjudged(shop):
    tools, paths, code, box = shop
    task = TASKS["shop_miss_func_001"]
    assert [bool(t.ground_truth) for t in task.turns] == [True, False, True]
    bfcl = replace(task, metadata={"checker": "bfcl"})
    assert [r.judged for r in replay_reference(bfcl, box, tools, paths, code=code)] == [True, False, True]
    assert all(r.judged for r in replay_reference(task, box, tools, paths, code=code))


def test_a_ground_truth_call_to_an_unknown_tool_names_the_task(shop):
    tools, paths, code, box = shop
    task = TASKS["shop_base_001"]
    broken = replace(task, turns=(turn([ToolCall("teleport", {})]),))
    with pytest.raises(KeyError, match="task 'shop_base_001': ground-truth call to unknown tool 'teleport'"):
        replay_reference(broken, box, tools, paths, code=code)


def test_the_cache_replays_once_per_task_protocol_and_code(shop):
    tools, paths, code, box = shop
    cache = ReferenceCache()
    task = TASKS["shop_base_001"]
    first = cache.get(task, box, tools, paths, code=code)
    assert cache.get(task, box, tools, paths, code=code) is first
    edited = cache.get(task, box, tools, paths, code=code + "edited")  # edited tool code: replayed again
    assert edited is not first and edited == first
    other = cache.get(TASKS["shop_miss_param_001"], box, tools, paths, code=code)
    assert other is not first and other != first


def test_the_fingerprint_follows_the_ground_truth_and_the_initial_state():
    task = TASKS["shop_base_001"]
    assert task_fingerprint(task) == task_fingerprint(replace(task))
    call = task.turns[0].ground_truth[0]
    changed_call = replace(task.turns[0], ground_truth=(replace(call, arguments={**call.arguments, "max_price": 81}),))
    assert task_fingerprint(replace(task, turns=(changed_call, *task.turns[1:]))) != task_fingerprint(task)
    assert task_fingerprint(replace(task, initial_state={SHOP: {"x": 1}})) != task_fingerprint(task)
    assert task_fingerprint(replace(task, id="other")) != task_fingerprint(task)
    assert task_fingerprint(replace(task, domain="other")) != task_fingerprint(task)


def test_episode_classes_cover_the_tasks_tools_and_the_tools_added_later(shop):
    tools = {name: replace(spec, implementation=f"mod_{name}:C.m") for name, spec in shop[0].items()}
    task = replace(TASKS["shop_miss_func_001"], tools=("view_cart",), initial_state={"mod_view_cart:C": {"a": 1},
                                                                                     "extra:C": {"b": 2}})
    # the listed tool, the tool added in turn 3, and every class with an initial state
    assert episode_classes(task, tools) == {"extra:C": {"b": 2}, "mod_cancel_order:C": None,
                                            "mod_view_cart:C": {"a": 1}}
    every = episode_classes(replace(task, tools=None, initial_state={}), tools)
    assert set(every) == {f"mod_{n}:C" for n in tools} and set(every.values()) == {None}


def test_state_diff_names_the_paths_that_differ_up_to_a_limit():
    expected = {"A": {"x": 1, "y": {"z": 2}}, "B": 1}
    assert state_diff(expected, expected) == ()
    assert state_diff(expected, {"A": {"x": 1, "y": {"z": 3}}, "B": 1}) == ("$.A.y.z",)
    assert state_diff(expected, {"A": {"x": 2, "y": {"z": 2}, "w": 0}}) == ("$.A.w", "$.A.x", "$.B")
    many = {str(i): i for i in range(3 * MAX_DIFF_PATHS)}
    assert len(state_diff(many, {})) == MAX_DIFF_PATHS


def reference(outputs=("out",), state=None, judged=True) -> TurnReference:
    return TurnReference(state=state or {"A": {"x": 1}}, outputs=tuple(outputs), judged=judged)


def test_a_matching_turn_passes():
    verdict = judge_turn(reference(), turn(required=("Order",)), {"A": {"x": 1}}, ["out"], "your order is ready", 1)
    assert verdict.passed and verdict.missing_outputs == 0 and verdict.state_diff == ()


def test_each_failed_check_is_reported_on_its_own():
    gt = turn(required=("ORD-1",))
    state_off = judge_turn(reference(), gt, {"A": {"x": 2}}, ["out"], "ORD-1", 1)
    assert (state_off.state_matches, state_off.outputs_match, state_off.response_matches) == (False, True, True)
    assert state_off.state_diff == ("$.A.x",)
    outputs_off = judge_turn(reference(("out", "out", "other")), gt, {"A": {"x": 1}}, ["out"], "ORD-1", 1)
    assert (outputs_off.state_matches, outputs_off.outputs_match, outputs_off.missing_outputs) == (True, False, 2)
    answer_off = judge_turn(reference(), gt, {"A": {"x": 1}}, ["out"], "no idea", 1)
    assert (answer_off.outputs_match, answer_off.response_matches) == (True, False)


def test_outputs_from_earlier_turns_count_but_a_turn_with_ground_truth_needs_a_call():
    earlier = judge_turn(reference(), turn(), {"A": {"x": 1}}, ["out"], "", 1)
    assert earlier.outputs_match
    no_call = judge_turn(reference(), turn(), {"A": {"x": 1}}, ["out"], "", 0)  # BFCL's empty turn
    assert not no_call.outputs_match and no_call.missing_outputs == 0 and not no_call.passed


def test_a_turn_without_ground_truth_must_be_answered_without_calls():
    quiet = judge_turn(reference(()), turn(()), {"A": {"x": 1}}, [], "which one?", 0)
    assert quiet.passed and quiet.outputs_match
    called = judge_turn(reference(()), turn(()), {"A": {"x": 1}}, ["x"], "done", 1)
    assert not called.abstention_ok and not called.passed


def test_an_unjudged_turn_passes_whatever_happened():
    verdict = judge_turn(reference(judged=False), turn(required=("x",)), {"A": {"x": 9}}, [], "", 3)
    assert verdict.passed and verdict.abstention_ok and verdict.state_diff == () and verdict.missing_outputs == 0
    assert (verdict.state_matches, verdict.outputs_match, verdict.response_matches) == (True, True, True)


def test_the_fingerprint_ignores_key_order_and_takes_any_state_value():
    task = TASKS["shop_base_001"]
    ordered = replace(task, initial_state={SHOP: {"x": 1, "y": 2}})
    assert task_fingerprint(ordered) == task_fingerprint(replace(task, initial_state={SHOP: {"y": 2, "x": 1}}))
    dated = replace(task, initial_state={SHOP: {"since": date(2026, 1, 1)}})  # not JSON: compared as text
    assert task_fingerprint(dated) != task_fingerprint(replace(task, initial_state={SHOP: {"since": date(2026, 1, 2)}}))
