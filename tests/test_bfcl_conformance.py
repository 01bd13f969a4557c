"""BFCL conformance: our env + verifier agree with bfcl-eval's official multi-turn checker.

On all 800 tasks the ground-truth replay scores 1.0 and the official checker agrees; on perturbed trajectories
(a call dropped, an argument changed, an extra tool called, a turn answered early) our verdict equals the
official checker's on every case. Runs in-process (the whole loop takes seconds); a few tasks also in Docker.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("bfcl_eval")

from seal_envs.bfcl import bfcl_tasks, make_env  # noqa: E402
from seal_envs.bfcl.checker import call_string, official_verdict  # noqa: E402
from seal_envs.bfcl.split import compute_split, render, SPLIT_FILE  # noqa: E402
from seal_envs.bfcl.tasks import parse_call  # noqa: E402
from seal_envs.evaluation.policies import ReplayPolicy  # noqa: E402
from seal_envs.evaluation.runner import run_episode  # noqa: E402
from seal_envs.spec import load_domain  # noqa: E402
from seal_envs.task import Task, ToolCall  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PERTURBATIONS = ("drop_call", "change_argument", "extra_tool", "answer_early")


@pytest.fixture(scope="module")
def env():
    env = make_env(split="all", mode="eval", sandbox="inprocess")
    yield env
    env.close()


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return None


def perturb(task: Task, kind: str, rng: random.Random, tools) -> list[list[ToolCall]] | None:
    """The ground truth with one deterministic change of ``kind``; None when the task offers no such change."""
    script = [list(t.ground_truth) for t in task.turns]
    with_calls = [i for i, calls in enumerate(script) if calls]
    turn = rng.choice(with_calls)
    calls = script[turn]
    if kind == "drop_call":
        del calls[rng.randrange(len(calls))]
    elif kind == "change_argument":
        candidates = [(j, k) for j, c in enumerate(calls) for k, v in c.arguments.items() if _changed(v) is not None]
        if not candidates:
            return None
        j, key = rng.choice(candidates)
        calls[j] = ToolCall(calls[j].name, {**calls[j].arguments, key: _changed(calls[j].arguments[key])})
    elif kind == "extra_tool":
        free = [n for n in task.tools if not tools[n].required]
        if not free:
            return None
        turn = rng.randrange(len(script))  # any turn, also one that expects no call
        script[turn].append(ToolCall(rng.choice(free), {}))
    elif kind == "answer_early":
        script[turn] = calls[: rng.randrange(len(calls))]
    return script


def replay(env, task: Task, script) -> tuple[float, bool, list[str]]:
    record = run_episode(env, ReplayPolicy(lambda _task: script), task)
    return record.reward, bool(official_verdict(task, record.calls)["valid"]), record.labels


def test_tools_json_is_generated_and_valid():
    out = subprocess.run([sys.executable, str(ROOT / "tool_specs/bfcl/make_specs.py"), "--check"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr
    domain = load_domain("bfcl")
    assert len(domain.tools) == 128 and len(set(domain.tool_names)) == 128
    assert all(t.implementation.split(":")[0].startswith(("bfcl_eval.", "seal_envs.bfcl.")) for t in domain.tools)


def test_split_file_is_current_and_balanced():
    assert SPLIT_FILE.read_text() == render(compute_split())
    doc = json.loads(SPLIT_FILE.read_text())
    for part in ("train", "eval"):
        assert {c: len(ids) for c, ids in doc[part].items()} == {c: 100 for c in doc[part]}
    train = {i for ids in doc["train"].values() for i in ids}
    assert not train & {i for ids in doc["eval"].values() for i in ids}
    assert len(bfcl_tasks("train")) == len(bfcl_tasks("eval")) == 400 and len(bfcl_tasks("all")) == 800


def test_ground_truth_strings_round_trip():
    for task in bfcl_tasks("all"):
        for turn, strings in zip(task.turns, task.metadata["bfcl_ground_truth"]):
            assert [parse_call(s) for s in strings] == list(turn.ground_truth)
            assert [parse_call(call_string(c)) for c in turn.ground_truth] == list(turn.ground_truth)


def test_miss_func_and_miss_param_turns():
    for task in bfcl_tasks("all", "miss_func"):
        holdout = {int(k) for k in task.metadata["missed_function"]}
        for i, turn in enumerate(task.turns):
            assert turn.expects_abstention == (not turn.ground_truth)
            if i in holdout:
                assert not set(turn.add_tools) & set(task.tools)
                assert task.turns[i - 1].expects_abstention
    for task in bfcl_tasks("all", "miss_param"):
        assert any(not t.ground_truth for t in task.turns) and not any(t.expects_abstention for t in task.turns)


def test_ground_truth_replay_scores_one_on_all_800(env):
    failures = []
    for task in env.unwrapped.tasks:
        reward, official, labels = replay(env, task, [list(t.ground_truth) for t in task.turns])
        if reward != 1.0 or not official:
            failures.append((task.id, reward, official, labels))
    assert len(env.unwrapped.tasks) == 800
    assert not failures, failures[:10]


def test_perturbed_verdicts_equal_the_official_checker(env):
    tools = env.unwrapped.tools
    cases, disagreements, failing = 0, [], 0
    for task in env.unwrapped.tasks:
        for kind in PERTURBATIONS:
            script = perturb(task, kind, random.Random(f"{task.id}/{kind}"), tools)
            if script is None:
                continue
            reward, official, labels = replay(env, task, script)
            cases += 1
            failing += reward == 0.0
            if (reward == 1.0) != official:
                disagreements.append((task.id, kind, reward, official, labels))
    print(f"\nBFCL conformance: {cases - len(disagreements)}/{cases} perturbed trajectories agree "
          f"({100 * (cases - len(disagreements)) / cases:.2f}%), {failing} of them fail")
    assert cases > 2500 and failing > cases // 2
    assert not disagreements, disagreements[:10]


@pytest.mark.docker
def test_docker_subset_matches_inprocess():
    pytest.importorskip("docker")
    from seal_envs.sandbox.docker import docker_client

    try:
        docker_client()
    except Exception as exc:  # no daemon here: the CI job starts one
        pytest.skip(f"no Docker daemon: {exc}")
    tasks = [bfcl_tasks("all", c)[0] for c in ("base", "miss_func", "miss_param", "long_context")]
    docker_env = make_env(split="all", mode="eval", sandbox="docker")
    try:
        for task in tasks:
            assert replay(docker_env, task, [list(t.ground_truth) for t in task.turns])[:2] == (1.0, True)
            script = perturb(task, "change_argument", random.Random(task.id), docker_env.unwrapped.tools)
            reward, official, _ = replay(docker_env, task, script)
            assert (reward == 1.0) == official
    finally:
        docker_env.close()
