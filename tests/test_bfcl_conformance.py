"""BFCL conformance: in eval mode the env is BFCL, message for message and verdict for verdict.

- Every perturbation family of ``seal_envs.bfcl.conformance`` on all 800 tasks: the env's reward equals BFCL's
  official checker on the calls the env decoded, on every trajectory.
- All 800 tasks through BFCL's own multi-turn inference loop (``seal_envs.bfcl.reference``) with the same scripted
  model: every request the model is sent (messages, tool results, tools and their order) hashes the same as in
  eval mode, and BFCL's whole pipeline gives the same verdict; every family is also run through that pipeline on
  a fixed slice of tasks.
- A training env with the original interface behaves exactly like an eval env.
Runs in-process, the two sweeps over all 800 tasks spread over the cores (about two minutes on 2 cores); a few
tasks also in Docker.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("bfcl_eval")

from seal_envs.bfcl import bfcl_tasks, make_env  # noqa: E402
from seal_envs.bfcl.checker import call_string  # noqa: E402
from seal_envs.bfcl.conformance import FAMILIES, Judgement, ScriptPolicy, judge, message  # noqa: E402
from seal_envs.bfcl.reference import bfcl_pipeline  # noqa: E402
from seal_envs.bfcl.split import compute_split, render, SPLIT_FILE  # noqa: E402
from seal_envs.bfcl.tasks import parse_call  # noqa: E402
from seal_envs.evaluation.runner import run_episode  # noqa: E402
from seal_envs.interface import InterfaceState  # noqa: E402
from seal_envs.spec import load_domain  # noqa: E402
from seal_envs.task import Task  # noqa: E402

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env():
    env = make_env(split="all", mode="eval", sandbox="inprocess")
    yield env
    env.close()


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


def _over_processes(work: Callable[[int, int], T]) -> list[T]:
    """``work(shard, shards)`` in a process per core (at most 4), each shard every ``shards``-th task of the 800."""
    shards = max(1, min(os.cpu_count() or 1, 4))
    with ProcessPoolExecutor(shards, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(work, range(shards), [shards] * shards))


def _shard_tasks(shard: int, shards: int) -> tuple[Any, list[Task]]:
    """An eval env of this process's own and its shard of the tasks."""
    env = make_env(split="all", mode="eval", sandbox="inprocess")
    return env, env.unwrapped.tasks[shard::shards]


def _judge_shard(shard: int, shards: int) -> dict[str, list[Judgement]]:
    """Every family on every task of the shard."""
    env, tasks = _shard_tasks(shard, shards)
    with env:
        return {family: [j for task in tasks if (j := judge(env, task, family)) is not None] for family in FAMILIES}


@pytest.fixture(scope="module")
def judgements():
    """Every family on every task it applies to (the env's verdict and the official checker's): about 12,000
    trajectories, 150 s in one process on 2 cores, so the tasks are shared out over the cores."""
    parts = _over_processes(_judge_shard)
    return {family: [j for part in parts for j in part[family]] for family in FAMILIES}


def test_ground_truth_scores_one_on_all_800(judgements):
    assert len(judgements["ground_truth"]) == 800
    assert all(j.record.reward == 1.0 and j.official["valid"] for j in judgements["ground_truth"])


def test_every_family_agrees_with_the_official_checker(judgements):
    assert len(FAMILIES) >= 15
    table = {f: (len(js), sum(j.agrees for j in js), sum(not j.record.passed for j in js))
             for f, js in judgements.items()}
    print("\nfamily                 trajectories  agree  failing")
    for family, (n, agree, failing) in table.items():
        print(f"{family:24s}{n:12d}{agree:7d}{failing:9d}")
    disagreements = [(j.task_id, f, j.record.reward, j.official.get("error_type"), j.record.labels)
                     for f, js in judgements.items() for j in js if not j.agrees]
    assert not disagreements, disagreements[:10]
    # the families are not vacuous: most apply widely, and they fail for many different reasons
    assert sum(n for n, _, _ in table.values()) > 12000
    assert all(n >= 100 for f, (n, _, _) in table.items() if f != "call_unoffered")
    reasons = Counter(j.official.get("error_type") for js in judgements.values() for j in js if not j.record.passed)
    assert {"multi_turn:instance_state_mismatch", "multi_turn:execution_response_mismatch",
            "multi_turn:empty_turn_model_response", "multi_turn:force_terminated"} <= set(reasons)


def _pipeline_differences(shard: int, shards: int) -> tuple[int, list[str]]:
    """The shard's size and its tasks on which the ground truth's requests or verdict differ from BFCL's pipeline."""
    policy = ScriptPolicy(lambda task: [[message(t.ground_truth)] if t.ground_truth else [] for t in task.turns])
    env, tasks = _shard_tasks(shard, shards)
    with env:
        differences = []
        for task in tasks:
            ours, theirs = run_episode(env, policy, task), bfcl_pipeline(task, policy)
            if (ours.requests_sha256, ours.passed) != (theirs.requests_sha256, theirs.valid):
                differences.append(task.id)
    return len(tasks), differences


def test_requests_and_verdicts_equal_bfcl_pipeline_on_all_800():
    """Ground truth on all 800 tasks: what the model is sent, request by request, and the verdict."""
    parts = _over_processes(_pipeline_differences)
    differences = [task_id for _, part in parts for task_id in part]
    assert sum(n for n, _ in parts) == 800 and not differences, differences[:10]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_equals_bfcl_pipeline_on_a_slice(env, family):
    """Each family through BFCL's whole pipeline on every 25th task: same requests, same verdict."""
    compared = 0
    for task in env.unwrapped.tasks[::25]:
        judgement = judge(env, task, family)
        if judgement is None:
            continue
        theirs = bfcl_pipeline(task, ScriptPolicy(lambda _task: judgement.script))
        assert (judgement.record.requests_sha256, judgement.record.passed) == (theirs.requests_sha256, theirs.valid), \
            (task.id, judgement.record.labels, theirs.responses)
        compared += 1
    assert compared >= 1


def test_training_env_with_the_original_interface_is_the_eval_env(env):
    train = make_env(split="all", mode="train", sandbox="inprocess")
    try:
        for family in FAMILIES:
            for task in env.unwrapped.tasks[3::40]:
                ours, theirs = judge(env, task, family), judge(train, task, family)
                if ours is None:
                    continue
                assert (ours.record.requests_sha256, ours.record.reward, ours.record.labels) == (
                    theirs.record.requests_sha256, theirs.record.reward, theirs.record.labels), (family, task.id)
    finally:
        train.close()


def test_evolved_interface_never_changes_the_judgement_of_the_same_calls(env):
    """Cues change what the policy sees, not how the same executed calls are judged."""
    evolved = make_env(split="all", mode="train", sandbox="inprocess", interface=InterfaceState(
        schema_cues=True, error_hints=True, guidelines=("spurious_tool_call", "state_mismatch")))
    try:
        for family in ("ground_truth", "change_argument", "float_numbers", "nudge_number", "call_unoffered",
                       "hallucinated_function", "spurious_early_call", "step_cap"):
            for task in env.unwrapped.tasks[5::40]:
                ours, theirs = judge(env, task, family), judge(evolved, task, family)
                if ours is None:
                    continue
                assert ours.record.requests_sha256 != theirs.record.requests_sha256
                assert (ours.record.calls, ours.record.reward, ours.record.labels) == (
                    theirs.record.calls, theirs.record.reward, theirs.record.labels), (family, task.id)
    finally:
        evolved.close()


@pytest.mark.docker
def test_docker_subset_matches_inprocess(env, docker_daemon):
    tasks = [bfcl_tasks("all", c)[0] for c in ("base", "miss_func", "miss_param", "long_context")]
    docker_env = make_env(split="all", mode="eval", sandbox="docker")
    try:
        for task in tasks:
            for family in ("ground_truth", "change_argument", "nudge_number", "hallucinated_function"):
                inproc, docker = judge(env, task, family), judge(docker_env, task, family)
                if inproc is None:
                    continue
                assert docker.agrees and (docker.record.requests_sha256, docker.record.reward) == (
                    inproc.record.requests_sha256, inproc.record.reward), (task.id, family)
    finally:
        docker_env.close()
