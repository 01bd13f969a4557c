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


def test_episodes_are_written_as_they_finish_and_resume_plays_the_rest(tmp_path, capsys, monkeypatch):
    args = ["--env", "seal/Shop-v0", "--sandbox", "inprocess", "--limit", "4", "--samples", "2", "--out", str(tmp_path)]
    started = []

    def start(self, task, real=ReplayPolicy.start):
        started.append(task.id)
        if len(started) == 4:
            raise KeyboardInterrupt
        real(self, task)

    monkeypatch.setattr(ReplayPolicy, "start", start)
    assert main(args) == 130
    assert "--resume" in capsys.readouterr().err
    journal = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(journal) == 3 and json.loads((tmp_path / "results.json").read_text())["summary"]["episodes"] == 3
    monkeypatch.undo()
    assert main([*args, "--resume"]) == 0
    assert "3 of 8 episodes already done, 5 to play" in capsys.readouterr().err
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [(e["task_id"], e["sample"]) for e in doc["episodes"]] == [(t, s) for t in dict.fromkeys(
        e["task_id"] for e in doc["episodes"]) for s in (0, 1)]
    assert doc["summary"]["pass_at_k"]["2"]["value"] == 100.0
    with pytest.raises(SystemExit):
        main([*args[:-2], "--out", str(tmp_path), "--resume", "--policy", "nosuch"])
    assert main(["--domain", str(LEDGER), "--sandbox", "inprocess", "--out", str(tmp_path),
                 "--resume"]) == 1  # another benchmark's run is not continued
    assert "holds a run of benchmark" in capsys.readouterr().err


def test_pass_at_k_and_both_averages():
    from seal_envs.evaluation.report import format_table, pass_at_k
    from seal_envs.evaluation.runner import EpisodeRecord

    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) and pass_at_k(5, 2, 4) == 1.0 and pass_at_k(5, 0, 3) == 0.0
    records = [EpisodeRecord("a1", "base", 1.0, []), EpisodeRecord("b1", "miss_func", 0.0, []),
               EpisodeRecord("b2", "miss_func", 0.0, [])]
    summary = summarize(records)
    assert summary["average"] == 50.0 and summary["micro_average"] == pytest.approx(100 / 3)
    assert summary["pass_at_k"]["1"]["value"] == pytest.approx(100 / 3)
    assert summary["pass_at_k"]["1"]["stderr"] == pytest.approx(100 * (1 / 3) ** 0.5 / 3 ** 0.5)
    table = format_table(summary)
    assert "mean of the 2 categories (macro" in table and "(micro): 33.33" in table and "pass@1: 33.33 ±" in table


def test_compare_warns_when_the_runs_are_different_benchmarks(tmp_path, capsys):
    for name, limit in (("shop", "3"), ("ledger", None)):
        args = ["--env", "seal/Shop-v0", "--limit", limit] if limit else ["--domain", str(LEDGER)]
        assert main([*args, "--sandbox", "inprocess", "--transcripts", "0", "--out", str(tmp_path / name)]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "shop"), str(tmp_path / "ledger")]) == 0
    out = capsys.readouterr().out
    assert "WARNING: different benchmarks" in out and "WARNING: different tasks" in out


def test_an_unreachable_endpoint_is_a_message(tmp_path, capsys):
    assert main(["--policy", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--env",
                 "seal/Shop-v0", "--sandbox", "inprocess", "--out", str(tmp_path)]) == 1
    assert "--base-url http://127.0.0.1:9/v1 does not answer" in capsys.readouterr().err


def test_docker_down_exits_non_zero_and_says_how_to_start_it(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    child = subprocess.run([sys.executable, "-m", "seal_envs.evaluation.cli", "--env", "seal/Shop-v0", "--limit", "1",
                            "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 1 and "Traceback" not in child.stderr
    assert "no Docker daemon answers" in child.stderr and "systemctl start docker" in child.stderr


def test_a_domain_with_only_a_tasks_file_is_one_split(tmp_path, capsys):
    assert main(["--domain", str(LEDGER), "--split", "all", "--sandbox", "inprocess", "--out", str(tmp_path)]) == 0
    assert main(["--domain", str(LEDGER), "--split", "eval", "--sandbox", "inprocess", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "declares no task_splits, so its tasks are the one split 'all'" in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--env", "seal/Nosuch-v0"], "Environment `Nosuch` doesn't exist"),
    (["--policy", "hf", "--model", "/nowhere/model", "--env", "seal/Shop-v0"], "no Hugging Face model folder"),
    (["--env", "seal/Shop-v0", "--samples", "0"], "--samples must be at least 1"),
])
def test_a_wrong_option_is_a_message_not_a_traceback(tmp_path, capsys, args, message):
    assert main([*args, "--sandbox", "inprocess", "--out", str(tmp_path)]) == 1
    assert message in capsys.readouterr().err
