"""``seal-eval`` on a few BFCL tasks, and the bad inputs a run must survive (diagnosed, never a crash)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("bfcl_eval")

from seal_envs.bfcl import bfcl_tasks, make_env  # noqa: E402
from seal_envs.bfcl.reference import bfcl_pipeline  # noqa: E402
from seal_envs.evaluation.cli import main  # noqa: E402
from seal_envs.evaluation.fingerprint import run_fingerprint  # noqa: E402
from seal_envs.evaluation.policies import ReplayPolicy, from_openai_message, to_openai_messages  # noqa: E402
from seal_envs.evaluation.runner import run_episode, stratified  # noqa: E402
from seal_envs.parsing import format_tool_call, parse_tool_calls  # noqa: E402
from seal_envs.task import ToolCall  # noqa: E402


def test_replay_prints_100_everywhere(tmp_path, capsys):
    assert main(["--policy", "replay", "--split", "eval", "--limit", "8", "--sandbox", "inprocess",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header, values = out.splitlines()[:2]
    assert "Average" in header and set(values.split()) == {"100.00"}
    assert "agreement with BFCL's official checker: 100.00%" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["summary"]["average"] == 100.0 and len(doc["episodes"]) == 8
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_parity_fingerprint_is_bfcls_own_pipelines(tmp_path, capsys):
    """seal-eval prints and stores the hash of every request it sent; BFCL's loop sends the same for the tasks."""
    assert main(["--split", "eval", "--limit", "12", "--sandbox", "inprocess", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    tasks = stratified(bfcl_tasks("eval"), 12)
    assert [e["requests_sha256"] for e in doc["episodes"]] == [
        bfcl_pipeline(t, ReplayPolicy()).requests_sha256 for t in tasks]
    expected = run_fingerprint(e["requests_sha256"] for e in doc["episodes"])
    assert doc["summary"]["requests_sha256"] == expected and expected in capsys.readouterr().out


def test_replay_per_category(tmp_path, capsys):
    for category in ("miss_func", "long_context"):
        assert main(["--category", category, "--limit", "3", "--sandbox", "inprocess", "--out", str(tmp_path)]) == 0
        assert capsys.readouterr().out.splitlines()[1].split() == ["100.00", "100.00"]


def test_openai_message_round_trip():
    text = '<tool_call>\n{"name": "ls", "arguments": {"a": true}}\n</tool_call>'
    history = [{"role": "user", "content": "list"}, {"role": "assistant", "content": text},
               {"role": "tool", "name": "ls", "content": '{"current_directory_content": []}'}]
    converted = to_openai_messages(history)
    call = converted[1]["tool_calls"][0]
    assert converted[2]["tool_call_id"] == call["id"] and json.loads(call["function"]["arguments"]) == {"a": True}
    assert parse_tool_calls(from_openai_message(converted[1])).calls == (ToolCall("ls", {"a": True}),)


@pytest.fixture()
def env():
    env = make_env(split="all", mode="eval", sandbox="inprocess")
    yield env
    env.close()


def test_broken_initial_config_is_a_task_error(env):
    task = bfcl_tasks("all", "base")[0]
    path = next(p for p in task.initial_state if p.endswith(":GorillaFileSystem"))
    broken = replace(task, id="broken_config", initial_state={**task.initial_state, path: {"root": {"x": {}}}})
    env.unwrapped.tasks += (broken,)
    env.unwrapped._tasks_by_id[broken.id] = broken
    record = run_episode(env, ReplayPolicy(), broken)
    assert record.task_error and "cannot be executed" in record.task_error and record.labels == ["task_error"]
    assert record.reward == 0.0


def test_backend_exception_and_hallucinated_function_are_diagnosed(env):
    task = bfcl_tasks("all", "base")[0]
    bad = [ToolCall("cd", {"folder": 3, "extra": True}), ToolCall("teleport", {"to": "mars"})]
    env.reset(options={"task_id": task.id})
    observation, *_ = env.step("\n".join(format_tool_call(c) for c in bad))
    assert observation[0]["content"] == ("Error during execution: GorillaFileSystem.cd() got an unexpected keyword "
                                         "argument 'extra'")
    assert observation[1]["content"] == "Error during execution: name 'teleport' is not defined"

    record = run_episode(env, ReplayPolicy(lambda t: [bad] + [list(x.ground_truth) for x in t.turns[1:]]), task)
    first_turn = record.diagnoses[0]
    assert first_turn["label"] == "invalid_tool_call" and first_turn["evidence"]["outcomes"] == {
        "invalid_arguments": 1, "unknown_tool": 1}
    assert len(record.labels) == len(task.turns) and not record.infrastructure_error and record.reward == 0.0
