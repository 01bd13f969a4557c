"""``seal-eval`` beyond BFCL: any env id or domain, stratified limits, concurrent workers, transcripts, the chart
and ``seal-eval compare``; ground-truth replay scores 100 on every bundled non-BFCL domain."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from seal_envs.evaluation.cli import EvalConfig, eval_target, main
from seal_envs.evaluation.policies import ReplayPolicy
from seal_envs.evaluation.report import summarize, write_results
from seal_envs.evaluation.runner import run_episodes, stratified
from seal_envs.task import Task

from conftest import LEDGER

SHOP = EvalConfig(env="seal/Shop-v0", sandbox="inprocess")


def values_line(out: str) -> list[str]:
    return out.splitlines()[1].split()


def test_stratified_limit_keeps_every_category_in_proportion():
    tasks = [Task(f"{c}-{i}", "d", {}, (), category=c) for c, n in (("a", 23), ("b", 7), ("c", 6)) for i in range(n)]
    for limit, expected in ((3, {"a": 1, "b": 1, "c": 1}), (8, {"a": 5, "b": 2, "c": 1}), (12, {"a": 8, "b": 2, "c": 2})):
        chosen = stratified(tasks, limit)
        assert len(chosen) == limit and Counter(t.category for t in chosen) == expected
        assert chosen == stratified(list(tasks), limit)  # deterministic
        assert [t.id for t in chosen if t.category == "a"] == [f"a-{i}" for i in range(expected["a"])]
    assert stratified(tasks, 2) == (tasks[0], tasks[23]) and stratified(tasks, None) == tuple(tasks)


def test_replay_scores_100_on_shop_with_stratified_limit(tmp_path, capsys):
    assert main(["--env", "seal/Shop-v0", "--sandbox", "inprocess", "--limit", "6", "--out", str(tmp_path)]) == 0
    assert set(values_line(capsys.readouterr().out)) == {"100.00"}
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["summary"]["counts"] == {"base": 4, "miss_func": 1, "miss_param": 1}


@pytest.mark.parametrize("args", [["--env", "seal/Shop-v0"], ["--domain", "shop", "--split", "eval", "--limit", "12"],
                                  ["--domain", str(LEDGER)]], ids=["shop", "shop-eval-split", "ledger-folder"])
def test_ground_truth_replay_scores_100_on_every_domain(tmp_path, capsys, args):
    """``required_response`` included: the replay's answers state what the turn must report."""
    assert main([*args, "--sandbox", "inprocess", "--workers", "2", "--out", str(tmp_path)]) == 0
    assert set(values_line(capsys.readouterr().out)) == {"100.00"}


def sloppy_script(task: Task) -> list[list]:
    """The ground truth, except that every other task skips its last turn's calls: verdicts differ per task."""
    calls = [list(t.ground_truth) for t in task.turns]
    return calls[:-1] + [[]] if int(task.id[-1]) % 2 else calls


def test_workers_give_the_same_records_as_one_worker():
    target = eval_target(SHOP)
    runs = [run_episodes(target.tasks, target.make_env, lambda: ReplayPolicy(sloppy_script), workers, False)
            for workers in (1, 4)]
    assert [(r.task_id, r.reward, r.labels, r.messages) for r in runs[0]] == [
        (r.task_id, r.reward, r.labels, r.messages) for r in runs[1]]
    assert 0 < sum(r.passed for r in runs[0]) < len(runs[0])


def test_results_hold_every_transcript_and_the_chart(tmp_path):
    assert main(["--env", "seal/Shop-v0", "--sandbox", "inprocess", "--limit", "3", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["run"]["name"] == "replay" and doc["run"]["benchmark"] == "seal/Shop-v0" and doc["run"]["date"]
    for episode in doc["episodes"]:
        roles = [m["role"] for m in episode["messages"]]
        assert roles[0] in ("system", "user") and {"user", "assistant", "tool"} <= set(roles)
        assert any("<tool_call>" in m["content"] for m in episode["messages"] if m["role"] == "assistant")
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_prints_two_runs_side_by_side(tmp_path, capsys):
    target = eval_target(SHOP)
    for name, script in (("good", None), ("sloppy", sloppy_script)):
        records = run_episodes(target.tasks, target.make_env,
                               lambda s=script: ReplayPolicy(s) if s else ReplayPolicy(), 2, False)
        write_results(tmp_path / name, summarize(records), records, {"policy": name},
                      {"name": name, "benchmark": target.benchmark, "date": "2026-01-01T00:00:00"})
    sloppy = json.loads((tmp_path / "sloppy" / "results.json").read_text())
    lost = sum(not e["passed"] for e in sloppy["episodes"])
    assert main(["compare", str(tmp_path / "good"), str(tmp_path / "sloppy")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: good on seal/Shop-v0 (2026-01-01T00:00:00)\nB: sloppy on seal/Shop-v0")
    average = next(line for line in out.splitlines() if line.strip().startswith("Average")).split()
    assert average[:2] == ["Average", "100.00"] and float(average[3]) == float(average[2]) - 100
    assert any(line.split()[0] == "missing_tool_call" for line in out.splitlines() if line.strip())
    assert f"passed only in B: 0; passed only in A: {lost}" in out
    assert main(["compare", str(tmp_path / "good"), str(tmp_path / "nowhere")]) == 1


def test_unknown_category_is_a_clear_error():
    with pytest.raises(SystemExit, match="no task of category 'nope'; categories: \\['base', 'miss_func'"):
        eval_target(EvalConfig(env="seal/Shop-v0", sandbox="inprocess", category="nope"))
