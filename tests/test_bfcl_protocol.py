"""BFCL's rules in the env, one root cause at a time: decoding, turn rules, reachable functions, state equality,
result wording (the whole-suite proof is ``test_bfcl_conformance.py``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("bfcl_eval")

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call  # noqa: E402
from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler  # noqa: E402

from seal_envs.bfcl import MAX_STEPS_PER_TURN, bfcl_tasks, make_env  # noqa: E402
from seal_envs.bfcl.checker import call_string, forget_instances, official_verdict  # noqa: E402
from seal_envs.bfcl.conformance import ScriptPolicy, message  # noqa: E402
from seal_envs.bfcl.decoding import decode  # noqa: E402
from seal_envs.bfcl.protocol import BFCL  # noqa: E402
from seal_envs.evaluation.runner import run_episode  # noqa: E402
from seal_envs.interface import InterfaceState  # noqa: E402
from seal_envs.sandbox.inprocess import InProcessSandbox  # noqa: E402
from seal_envs.sandbox.server import to_jsonable  # noqa: E402
from seal_envs.task import ToolCall  # noqa: E402

LS = {"name": "ls", "arguments": {"a": True}}
CORPUS = [
    f"<tool_call>\n{json.dumps(LS)}\n</tool_call>",
    f"<tool_call>{json.dumps(LS)}</tool_call>",  # no newlines inside the tags
    f"<tool_call>\n{json.dumps({'name': 'ls', 'parameters': {'a': True}})}\n</tool_call>",
    f"<tool_call>\n{json.dumps({'name': 'ls', 'arguments': json.dumps({'a': True})})}\n</tool_call>",
    f"<tool_call>\n{json.dumps({'name': 'ls', 'arguments': [1]})}\n</tool_call>",
    f"<tool_call>\n{json.dumps({'name': 7, 'arguments': {}})}\n</tool_call>",
    f"<tool_call>\n{json.dumps([LS])}\n</tool_call>",
    f"<tool_call>\n{{'name': 'ls', 'arguments': {{}}}}\n</tool_call>",  # python-style quotes
    f"<tool_call>\n{json.dumps(LS)}\n</tool_call>\n<tool_call>\n{{broken\n</tool_call>",
    f"<think>\n<tool_call>\n{json.dumps(LS)}\n</tool_call>\n</think>\nNo call after all.",
    f"Sure.\n<tool_call>\n{json.dumps(LS)}\n</tool_call>\n<tool_call>\n{json.dumps({'name': 'pwd', 'arguments': {}})}"
    "\n</tool_call>",
    "I will not call anything.",
    "",
]


def bfcl_decoded(text: str) -> list[str]:
    """BFCL's own handler: the completion cleaned as it cleans it, then decoded (a failure means no calls)."""
    handler = QwenFCHandler("Qwen/Qwen2.5-7B-Instruct", 0.0, "seal", True)
    cleaned = handler._parse_query_response_prompting(SimpleNamespace(
        choices=[SimpleNamespace(text=text)], usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0)))
    try:
        return handler.decode_execute(cleaned["model_responses"], has_tool_call_tag=False)
    except Exception:
        return []


@pytest.mark.parametrize("text", CORPUS)
def test_decoding_is_bfcls_handler(text):
    parsed = decode(text)
    assert [call_string(c) for c in parsed.calls] == bfcl_decoded(text)


def test_rejected_blocks_are_parse_errors_for_the_diagnosis():
    assert decode(CORPUS[2]).calls == () and len(decode(CORPUS[2]).errors) == 1
    mixed = decode(CORPUS[8])
    assert mixed.calls == (ToolCall("ls", {"a": True}),) and len(mixed.errors) == 1


@pytest.fixture(scope="module")
def env():
    env = make_env(split="all", mode="eval", sandbox="inprocess")
    yield env
    env.close()


def first_call_turn(task):
    return next(i for i, t in enumerate(task.turns) if t.ground_truth)


def test_a_malformed_call_ends_the_turn_in_every_mode_and_interface(env):
    """BFCL's rule (its inference loop ends the turn on an undecodable message); hints never change it."""
    task = bfcl_tasks("all", "base")[0]
    train = make_env(split="all", mode="train", sandbox="inprocess")
    hinted = make_env(split="all", mode="train", sandbox="inprocess", interface=InterfaceState(error_hints=True))
    try:
        steps = []
        for e in (env, train, hinted):
            e.reset(options={"task_id": task.id})
            steps.append(e.step(CORPUS[2]))
        next_turn = ({"role": "user", "content": task.turns[1].user},)
        assert all(info["turn_ended"] and obs == next_turn for obs, _, _, _, info in steps)
        assert {info["label"] for *_, info in steps} == {"invalid_tool_call"}
        assert {info["tag"] for *_, info in steps} == {"empty_turn_model_response"}
    finally:
        train.close()
        hinted.close()


@pytest.mark.parametrize("last_turn", [False, True])
def test_step_cap_force_quits_and_fails_unless_in_the_last_turn(env, last_turn):
    task = next(t for t in bfcl_tasks("all", "base") if t.turns[-1].ground_truth and t.turns[0].ground_truth)
    capped = len(task.turns) - 1 if last_turn else 0
    filler = message([ToolCall("look_around", {})])

    def script(_task):
        turns = [[message(t.ground_truth)] if t.ground_truth else [] for t in task.turns]
        turns[capped] += [filler] * (MAX_STEPS_PER_TURN - 1)
        return turns

    record = run_episode(env, ScriptPolicy(script), task)
    assert record.step_cap_hit and len(record.calls) == capped + 1
    assert record.passed == last_turn == official_verdict(task, record.calls)["valid"]


def test_functions_are_reachable_before_they_are_offered(env):
    task = next(t for t in bfcl_tasks("all", "miss_func") if t.id.endswith("_49"))
    holdout = int(next(iter(task.metadata["missed_function"])))
    assert "tail" not in task.tools and "tail" in task.turns[holdout].add_tools
    early = next(i for i, t in enumerate(task.turns) if any(c.name == "tail" for c in t.ground_truth))
    assert early < holdout  # BFCL's own ground truth calls it before it is offered
    observation, info = env.reset(options={"task_id": task.id})
    assert "tail" not in [t["function"]["name"] for t in info["tools"]]
    record = run_episode(env, ScriptPolicy(lambda t: [[message(x.ground_truth)] if x.ground_truth else []
                                                      for x in t.turns]), task)
    assert record.passed and official_verdict(task, record.calls)["valid"]


def test_added_functions_come_last_with_their_own_description(env):
    task = next(t for t in bfcl_tasks("all", "miss_func") if t.metadata["missed_function"])
    holdout = int(next(iter(task.metadata["missed_function"])))
    env.reset(options={"task_id": task.id})
    for turn in range(holdout):
        *_, info = env.step("I cannot help with that.")
    added = info["tools"][-len(task.turns[holdout].add_tools):]
    assert [t["function"]["name"] for t in added] == list(task.turns[holdout].add_tools)
    assert not any("Python 3 syntax" in t["function"]["description"] for t in added)
    assert all("Python 3 syntax" in t["function"]["description"] for t in info["tools"][: -len(added)])


def test_state_keys_keep_pythons_equality():
    assert to_jsonable({0.0: ["a"]}) == to_jsonable({0: ["a"]}) == to_jsonable({False: ["a"]})
    assert to_jsonable({0.5: 1}) != to_jsonable({0: 1}) and to_jsonable({"0": 1}) != to_jsonable({0: 1})


def bfcl_execution(call: ToolCall, backend: str) -> str:
    name = "seal_protocol_test"
    try:
        return execute_multi_turn_func_call([call_string(call)], {}, [backend], name, "entry_0")[0][0]
    finally:
        forget_instances(name)


@pytest.mark.parametrize("call", [
    ToolCall("logarithm", {"value": 20, "base": 10, "precision": 2}),
    ToolCall("logarithm", {"value": 20.2, "base": 10, "precision": 2}),
    ToolCall("square_root", {"number": 2, "precision": 30}),
    ToolCall("mean", {"numbers": []}),
    ToolCall("add", {"a": 1}),
])
def test_results_are_worded_and_compared_as_bfcl_does(call):
    box = InProcessSandbox()
    box.reset({"bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api:MathAPI": None})
    result = box.call(f"bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api:MathAPI.{call.name}",
                      call.arguments)
    assert BFCL.render(result) == BFCL.output(result) == bfcl_execution(call, "MathAPI")


def test_log_of_20_and_20_2_differ_as_in_bfcl():
    texts = {bfcl_execution(ToolCall("logarithm", {"value": v, "base": 10, "precision": 2}), "MathAPI")
             for v in (20, 20.2)}
    assert len(texts) == 2
