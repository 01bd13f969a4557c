"""``seal-train`` on an existing Ray cluster: which address is joined, which ``ray_init`` keys are dropped, and what
a cluster too small for the job is told (``seal_trainer.cluster``). Fast: no Ray is started here."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from seal_trainer.cli import compose
from seal_trainer import cluster
from seal_trainer.cluster import (ClusterError, ResourceNeeds, check_cluster, cluster_address, joining_ray_init,
                                  lost_node, nodes_without_docker, oom_kills)


def _node(cpu: float, gpu: float = 0, alive: bool = True, ip: str = "10.0.0.1") -> dict:
    return {"Alive": alive, "NodeManagerAddress": ip, "Resources": {"CPU": cpu, **({"GPU": gpu} if gpu else {})}}


@pytest.fixture(scope="module")
def cpu_cfg():
    return compose(overrides=["seal.model=tiny"], cpu=True)


def test_address_from_config_or_environment(cpu_cfg, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(cpu_cfg) is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cluster_address(cpu_cfg) == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "local")  # Ray's own word for "start a new instance"
    assert cluster_address(cpu_cfg) is None
    cfg = compose(overrides=["seal.model=tiny", "+ray_kwargs.ray_init.address=auto"], cpu=True)
    assert cluster_address(cfg) == "auto"


def test_joining_drops_the_cluster_size_that_ray_refuses(cpu_cfg, monkeypatch):
    cfg = OmegaConf.create(OmegaConf.to_container(cpu_cfg))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert joining_ray_init(cfg) == [] and cfg.ray_kwargs.ray_init.num_cpus >= 8  # a local instance keeps them
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert set(joining_ray_init(cfg)) == {"num_cpus", "num_gpus"}
    ray_init = cfg.ray_kwargs.ray_init
    assert "num_cpus" not in ray_init and "num_gpus" not in ray_init
    assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"  # the CPU shims still reach every worker


def test_a_run_without_an_address_starts_its_own_ray_instance(cpu_cfg, monkeypatch):
    """A bare ray.init() would attach to whatever cluster `ray start` last left on the machine (another job's)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = OmegaConf.create(OmegaConf.to_container(cpu_cfg))
    assert cluster.join_cluster(cfg) is None
    assert cfg.ray_kwargs.ray_init.address == "local" and cfg.ray_kwargs.ray_init.num_cpus >= 8
    assert cluster_address(cfg) is None  # "local" still reads as no cluster to join


def test_needs_follow_verl_placement(cpu_cfg):
    needs = ResourceNeeds.of(cpu_cfg)
    assert (needs.nnodes, needs.gpus_per_node, needs.storage_units) == (1, 1, 1)
    assert needs.cpus_per_node == 3 and needs.total_cpus == 5
    gpu = ResourceNeeds(nnodes=2, gpus_per_node=8, storage_units=8)
    assert gpu.cpus_per_node == 24 and gpu.total_cpus == 2 * 24 + 1 + 8


def test_a_fitting_cluster_has_no_shortfall():
    needs = ResourceNeeds(nnodes=1, gpus_per_node=1, storage_units=1)
    nodes = [_node(8, 1), _node(2, ip="10.0.0.2"), _node(2, ip="10.0.0.3")]
    assert needs.shortfalls(nodes, {"CPU": 12, "GPU": 1}) == []


def test_shortfalls_name_what_is_missing():
    needs = ResourceNeeds(nnodes=2, gpus_per_node=4, storage_units=8)
    nodes = [_node(64, 4), _node(64, 2, ip="10.0.0.2"), _node(64, 4, alive=False, ip="10.0.0.3")]
    (placement, gpus) = needs.shortfalls(nodes, {"CPU": 128, "GPU": 6})
    assert "needs 2 node(s) with at least 4 GPU and 12 CPU each; 1 of the cluster's nodes" in placement
    assert "10.0.0.2: 64 CPU 2 GPU" in placement and "10.0.0.3" not in placement  # dead nodes do not count
    assert gpus.startswith("the job needs 8 GPU free in the cluster, 6 are")
    cpu_only = ResourceNeeds(nnodes=1, gpus_per_node=1, storage_units=1).shortfalls([_node(16)], {"CPU": 16})
    assert len(cpu_only) == 2 and "0 of the cluster's nodes" in cpu_only[0]


def test_an_unreachable_address_is_a_clear_error(cpu_cfg, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(ClusterError, match="cannot join the Ray cluster at '127.0.0.1:1'"):
        check_cluster(cpu_cfg, connect_timeout_s=2)


def test_nodes_without_docker_say_which_and_why(monkeypatch):
    nodes = {"a" * 56: "10.0.0.1", "b" * 56: "10.0.0.2", "c" * 56: "10.0.0.3"}
    monkeypatch.setattr(cluster, "_episode_nodes", lambda: nodes)
    answers = {"a" * 56: None, "b" * 56: "none answers at unix:///var/run/docker.sock: refused"}  # c: silent
    monkeypatch.setattr(cluster, "_on_every_node", lambda fn, ids, timeout_s: answers)
    (problem,) = nodes_without_docker()
    assert "node 10.0.0.2 (bbbbbbbb) reach no Docker daemon (none answers at unix:///var/run/docker.sock" in problem
    assert "DOCKER_HOST" in problem  # what to fix; a node too slow to answer is only warned about
    answers.pop("b" * 56)
    assert nodes_without_docker() == []


def test_a_node_without_a_daemon_is_told_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    assert cluster._docker_here().startswith(f"none answers at unix://{tmp_path}/no.sock")


def test_a_lost_node_is_named_from_rays_words():
    actor = ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
             "\tclass_name: AgentLoopWorker\nThe actor died because its node has died. Node Id: 3f2a9c\n")
    task = ("Task failed because the node it was running on is dead or unavailable. Node IP: 10.0.0.3, node ID: "
            "77ab01. This can happen if the node was preempted")
    gcs = ("\x1b[33m(raylet)\x1b[0m The node with node id: 9e01ff and address: 192.0.2.2 and node name: 192.0.2.2 has "
           "been marked dead because the detector has missed too many heartbeats from it.")
    assert lost_node("step 3\n" + gcs + "\nray.exceptions.ActorUnavailableError: ...") == "9e01ff"
    assert lost_node("step 3\n" + actor) == "3f2a9c"
    assert lost_node(task) == "77ab01"
    assert lost_node("ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation "
                     "task, ValueError") is None  # an actor's own error is not a lost node


def test_rays_memory_kills_are_read_from_its_summary_line():
    line = ("(raylet) node_manager.cc:3517: 5 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
            "crashed due to other reasons at node (ID: e73f36, IP: 192.0.2.2) over the last time period.")
    assert oom_kills(line) == (5, "192.0.2.2")
    assert oom_kills(line.replace("5 Workers", "0 Workers")) is None and oom_kills("step:3 - reward 0.5") is None
