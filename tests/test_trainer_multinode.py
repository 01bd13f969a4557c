"""``seal-train`` on a three-node Ray cluster (``tests/simulated_cluster.py``: one machine, a Docker daemon per node).

One run of the tiny model proves the multi-node path, from joining to losing a node. The job joins the running
cluster through ``+ray_kwargs.ray_init.address`` (CPU mode: the head carries the Ray GPU slot), with one agent-loop
worker per node and a driver that reaches no Docker daemon itself (each node's processes use their own). Held-out
validation runs before step 1 and after step 2; during step 3 the raylet of a worker node that hosts an agent-loop
worker but not verl's task runner is killed (the trainer lives on and must notice). Checked:

- every node's daemon ran sandboxes (a worker only sees its own node's daemon);
- the interface published after step 1 is in every training prompt of step 2 (one per node), not in step 1's,
  and no held-out prompt carries any interface cue;
- the run never hangs on the lost node (verl alone would wait for the lost worker's episodes for ever): a failed run
  names it; step 3 is either not scored at all or, when the episodes that touched the lost node came back as
  failures (a CI run saw this: 2 of step 3's samples) or verl retried, scored with those samples as infrastructure
  errors, never the agent's;
- each surviving node's reaper removed the job's sandboxes and left a live process's container alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulated_cluster import SimNode, SimulatedCluster, can_start_daemons

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(900)]

NODES = 3


@pytest.fixture
def cluster():
    if not can_start_daemons():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the multi-node test: it starts a Docker daemon per node (root, dockerd)")
        pytest.skip("starting per-node Docker daemons needs root and dockerd")
    with SimulatedCluster(NODES) as sim:
        yield sim


def seal_train(address: str, run: Path, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "seal_trainer.cli", "seal.model=tiny", "seal.warm_start.steps=0",
           f"+ray_kwargs.ray_init.address={address}", "seal.env.sandbox=docker", "data.train_batch_size=1",
           "actor_rollout_ref.actor.ppo_mini_batch_size=1", f"actor_rollout_ref.rollout.n={NODES}",
           f"actor_rollout_ref.rollout.agent.num_workers={NODES}", "data.max_response_length=96",
           f"seal.dataset.n_val={NODES}", "seal.max_assistant_turns=2", f"trainer.default_local_dir={run}",
           f"trainer.validation_data_dir={run / 'validation'}", "trainer.experiment_name=multinode", *overrides]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["DOCKER_HOST"] = f"unix://{run.parent}/no-daemon.sock"  # the driver needs no daemon: the nodes have theirs
    return subprocess.Popen(cmd, cwd=run.parent, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _interrupt(child: subprocess.Popen) -> str:
    """Stop ``child`` (SIGINT: it ends its training child first); its output."""
    child.send_signal(signal.SIGINT)
    try:
        return child.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        child.kill()
        return child.communicate()[0]


def _finish(child: subprocess.Popen, timeout: float) -> str:
    """The child's output once it exits; interrupted when it overruns."""
    try:
        return child.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        raise AssertionError(f"seal-train did not finish within {timeout:.0f} s: {_interrupt(child)[-3000:]}") from None


def _records(run: Path) -> list[dict]:
    log = run / "seal_steps.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _jsonl(folder: Path) -> dict[int, list[dict]]:
    return {int(f.stem): [json.loads(line) for line in f.open()] for f in sorted(folder.glob("*.jsonl"))}


def _cues(interface: dict) -> set[str]:
    """The lines an interface adds to a training prompt (schema instruction, guidelines: the system prompt)."""
    from seal_envs.interface import InterfaceState, render_system_prompt

    text = render_system_prompt(None, InterfaceState.from_json(interface)) or ""
    return {line for line in text.splitlines()[1:] if line.strip()}  # past the "Guidelines:" heading


def _every_cue() -> set[str]:
    from seal_envs.interface import GUIDELINES, SCHEMA_INSTRUCTION

    return {SCHEMA_INSTRUCTION, *GUIDELINES.values()}


def _foreign_sandbox(node: SimNode) -> str:
    """A sandbox-labelled container on ``node``'s daemon owned by this (live) process: no reaper may remove it."""
    from seal_envs.sandbox.image import build_image
    from seal_envs.sandbox.reaper import LABEL, owner_labels

    client = node.client()
    image = build_image(client, progress=lambda _: None)  # also spares the node's first worker the build
    return client.containers.create(image.tag, command=["true"], labels={LABEL: "1", **owner_labels()}).id


def test_three_nodes_train_then_one_is_lost(cluster, tmp_path):
    foreign = [_foreign_sandbox(node) for node in cluster.nodes]
    started = time.time()
    run = tmp_path / "run"
    child = seal_train(cluster.address, run, "trainer.total_training_steps=3", "trainer.test_freq=2",
                       "seal.interface.min_count=1")  # a guideline from step 1's few failing turns
    deadline = time.time() + 480
    while sum("validation" in r for r in _records(run)) < 2:  # held-out after step 2 done: step 3 starts
        assert child.poll() is None, child.communicate()[0][-3000:] + (run / "train.log").read_text()[-4000:]
        if time.time() > deadline:  # its output says why (e.g. Ray killing its workers for lack of memory)
            raise AssertionError(f"no held-out validation after step 2 within 480 s: {_interrupt(child)[-3000:]}")
        time.sleep(0.5)
    trainer = cluster.nodes_hosting("SealTaskRunner")  # Ray places verl's task runner on any node
    assert trainer, cluster.cluster.global_state.actor_table(None)
    victim = next(i for i in range(NODES - 1, 0, -1) if cluster.nodes[i].node_id not in trainer)
    cluster.kill_node(victim)  # a worker node with an agent-loop worker, not the trainer's: the step must notice
    killed = time.time()
    out = _finish(child, 300)  # never a hang
    log = (run / "train.log").read_text()
    print(f"lost node: the run ended {time.time() - killed:.0f} s after the kill, exit {child.returncode}")

    assert f"joining the Ray cluster at {cluster.address}" in out
    created = [node.sandboxes_created(started) - set(foreign) for node in cluster.nodes]
    assert all(created), [len(c) for c in created]  # every node's worker ran episodes in its own node's daemon

    records = _records(run)
    steps = {r["step"]: r for r in records if "validation" not in r}
    first, published = steps[1]["interface_before"], steps[1]["interface"]
    new = _cues(published) - _cues(first)
    assert new, published  # the tiny model's failures in step 1 evolved the interface
    rollouts = _jsonl(run / "rollouts")
    assert [len(rollouts[1]), len(rollouts[2])] == [NODES, NODES]  # one sample per agent-loop worker, i.e. per node
    assert all(all(c in r["input"] for c in _cues(first)) for r in rollouts[1])  # the starting interface, and
    assert not any(c in r["input"] for r in rollouts[1] for c in new)  # step 1 ran the interface it started with
    assert all(all(c in r["input"] for c in _cues(published)) for r in rollouts[2])  # every node adopted it
    held_out = [r for rows in _jsonl(run / "validation").values() for r in rows]
    assert len(held_out) == 2 * NODES, len(held_out)
    assert not any(c in r["input"] for r in held_out for c in _every_cue())  # eval envs: the original interface

    if child.returncode != 0:  # the run failed: Ray's node-death error or SEAL's lost worker, named
        named = f"training failed because Ray node {cluster.nodes[victim].node_id} died"  # once Ray marked it dead
        noticed = "an agent-loop worker died or cannot be reached (its node lost?)"  # SEAL's trainer, often sooner
        assert named in out or noticed in log, out[-2000:] + log[-4000:]
    if 3 in steps:  # step 3 ended (its lost episodes came back as failures, or verl retried): never the agent's fault
        assert steps[3]["infrastructure_errors"] >= 1, steps[3]
    else:  # the step failed: nothing of it was scored
        assert child.returncode != 0 and 3 not in rollouts, (child.returncode, sorted(rollouts))
    for i, (node, mine) in enumerate(zip(cluster.nodes, foreign)):  # the survivors' reapers: the job's sandboxes only
        assert i == victim or [c["Id"] for c in node.sandboxes()] == [mine], i
