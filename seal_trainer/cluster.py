"""Which Ray cluster ``seal-train`` runs on: an existing one, or a local one it starts.

An address in ``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS`` (``auto``, ``<head ip>:6379``, ...) joins that
cluster; none (or ``local``) starts a local Ray instance, as verl's ``run_ppo`` does. Ray refuses a driver that
joins a cluster and names its size (``num_cpus``, ``num_gpus``, ...): the cluster's nodes declare their resources
when they start (``ray start --num-cpus ... --num-gpus ...``), so those keys are dropped from ``ray_init``
(``joining_ray_init``); CPU mode sets them for its local instance (``seal_trainer.cpu.cpu_overrides``).

Before training, ``check_cluster`` connects once and compares what the job will ask Ray for (``ResourceNeeds``:
verl's placement groups, ``trainer.nnodes`` nodes with ``trainer.n_gpus_per_node`` GPUs each, ``CPU_PER_GPU``
CPUs per GPU, plus TransferQueue's actors) with the cluster's nodes. A shortfall is an error that says what is
missing; unchecked, verl would wait for its placement groups for ever. On a CPU-only cluster the trainer still
takes one Ray ``GPU`` slot per worker (the CPU shims' fake GPU): start the node that should train with
``ray start --num-gpus=1``. With Docker sandboxes it also asks every node that can host agent-loop workers
whether its processes reach a Docker daemon (``DOCKER_HOST`` of that node's ``ray start``): the driver's daemon
says nothing about theirs, and a node without one would fail each of its episodes as an infrastructure error.

A run that fails because a node died says so (``lost_node``): verl does not retry the step. A run whose workers
Ray's memory monitor kills says so while it runs (``oom_kills``): Ray retries a killed task without end, so such
a run stalls instead of failing.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

logger = logging.getLogger(__name__)

LOCAL_ADDRESSES = ("", "local", "None", "null")

# verl's ResourcePoolManager.max_colocate_count: each GPU bundle of its placement groups also reserves this many
# CPUs (actor+ref, rollout, reward model may share the GPU)
CPU_PER_GPU = 3

# keys Ray refuses from a driver that joins an existing cluster (ray._private.worker.init)
AGENT_LOOP_WORKER = "agent_loop_worker_"  # verl names its agent-loop worker actors agent_loop_worker_<i>_<id>

CLUSTER_SIZE_KEYS = ("num_cpus", "num_gpus", "resources", "labels", "object_store_memory", "_system_config")


class ClusterError(RuntimeError):
    """The Ray cluster cannot run this job (unreachable, or too small); the message says what to change."""


def cluster_address(cfg: Any) -> str | None:
    """The address of the cluster to join, or None to start a local one."""
    ray_init = (cfg.get("ray_kwargs") or {}).get("ray_init") or {}
    address = ray_init.get("address") or os.environ.get("RAY_ADDRESS")
    if address is None or str(address).strip() in LOCAL_ADDRESSES:
        return None
    return str(address).strip()


def joining_ray_init(cfg: Any) -> list[str]:
    """Drop the cluster-size keys of ``ray_kwargs.ray_init`` when joining a cluster; returns the dropped keys."""
    from omegaconf import open_dict

    if cluster_address(cfg) is None:
        return []
    ray_init = cfg.ray_kwargs.ray_init
    dropped = [key for key in CLUSTER_SIZE_KEYS if ray_init.get(key) is not None]
    with open_dict(ray_init):
        for key in dropped:
            del ray_init[key]
    return dropped


@dataclass(frozen=True)
class ResourceNeeds:
    """What the job's placement asks Ray for."""

    nnodes: int
    gpus_per_node: int
    storage_units: int  # TransferQueue storage actors (one CPU each) besides its controller (one CPU)

    @classmethod
    def of(cls, cfg: Any) -> "ResourceNeeds":
        tq = cfg.get("transfer_queue") or {}
        units = ((tq.get("backend") or {}).get("SimpleStorage") or {}).get("num_data_storage_units") or 0
        return cls(int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node), int(units))

    @property
    def cpus_per_node(self) -> int:
        return CPU_PER_GPU * self.gpus_per_node

    @property
    def total_cpus(self) -> int:
        return self.nnodes * self.cpus_per_node + 1 + self.storage_units

    def shortfalls(self, nodes: list[dict[str, Any]], available: dict[str, float]) -> list[str]:
        """What the cluster lacks: ``nodes`` as ``ray.nodes()`` lists them, ``available`` as
        ``ray.available_resources()`` gives them. Empty when the job fits."""
        alive = [n for n in nodes if n.get("Alive")]
        fitting = [n for n in alive if n["Resources"].get("GPU", 0) >= self.gpus_per_node
                   and n["Resources"].get("CPU", 0) >= self.cpus_per_node]
        problems = []
        if len(fitting) < self.nnodes:
            shapes = ", ".join(f"{n.get('NodeManagerAddress', '?')}: {n['Resources'].get('CPU', 0):g} CPU "
                               f"{n['Resources'].get('GPU', 0):g} GPU" for n in alive) or "no live node"
            problems.append(
                f"trainer.nnodes={self.nnodes} x trainer.n_gpus_per_node={self.gpus_per_node} needs {self.nnodes} "
                f"node(s) with at least {self.gpus_per_node} GPU and {self.cpus_per_node} CPU each; "
                f"{len(fitting)} of the cluster's nodes have that ({shapes})")
        gpus = self.nnodes * self.gpus_per_node
        for name, need in (("GPU", gpus), ("CPU", self.total_cpus)):
            if available.get(name, 0) < need:
                problems.append(f"the job needs {need:g} {name} free in the cluster, {available.get(name, 0):g} "
                                f"are (other jobs may hold the rest)")
        return problems


def join_cluster(cfg: Any, docker: bool = False) -> str | None:
    """Make ``cfg`` join the cluster it names (``joining_ray_init``) once ``check_cluster`` found it fit (with
    ``docker``: also every node's Docker daemon); returns the address, or None for a local Ray instance.

    Without an address the run gets a fresh instance of its own (``address="local"``): a bare ``ray.init()``
    attaches to the cluster ``ray start`` last left on this machine, another job's, and then refuses the local
    instance's ``num_cpus``."""
    from omegaconf import open_dict

    address = cluster_address(cfg)
    if address is None:
        with open_dict(cfg):
            cfg.setdefault("ray_kwargs", {}).setdefault("ray_init", {})
            cfg.ray_kwargs.ray_init.address = "local"
        return None
    check_cluster(cfg, docker=docker)
    joining_ray_init(cfg)
    return address


def _probe(address: str, timeout_s: float) -> None:
    """Fail fast where nothing listens at ``host:port``: Ray itself retries a dead head for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return  # "auto" (Ray finds the local head itself) or a ray:// client address
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(f"cannot join the Ray cluster at {address!r}: nothing answers there ({exc}); start its "
                           "head with `ray start --head` or fix ray_kwargs.ray_init.address / RAY_ADDRESS") from None


def check_cluster(cfg: Any, connect_timeout_s: float = 10.0, docker: bool = False) -> None:
    """Connect to the cluster ``cfg`` names, check it can place the job (with ``docker``: that every node that can
    host agent-loop workers reaches a Docker daemon), disconnect. No-op without an address."""
    address = cluster_address(cfg)
    if address is None:
        return
    import ray

    needs = ResourceNeeds.of(cfg)
    _probe(address, connect_timeout_s)
    env_vars = ((cfg.get("ray_kwargs") or {}).get("ray_init") or {}).get("runtime_env", {}).get("env_vars") or {}
    try:  # the job's environment variables: the Docker check sees the nodes as the job's workers will
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, include_dashboard=False,
                 runtime_env={"env_vars": {str(k): str(v) for k, v in env_vars.items()}})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"cannot join the Ray cluster at {address!r} ({exc}); start it with `ray start --head` "
                           "or fix ray_kwargs.ray_init.address / RAY_ADDRESS") from None
    try:
        shortfalls = needs.shortfalls(ray.nodes(), ray.available_resources())
        no_docker = nodes_without_docker() if docker else []
    finally:
        ray.shutdown()
    errors = []
    if shortfalls:
        cpu_hint = (" On CPU, SEAL's trainer takes one Ray GPU slot per worker: start the training node with "
                    "`ray start --num-gpus=1 --num-cpus=8` (or more).") if str(cfg.trainer.device) == "cpu" else ""
        errors.append("cannot place this job: " + "; ".join(shortfalls) + "." + cpu_hint)
    if no_docker:
        errors.append("cannot run its sandboxes (seal.env.sandbox=docker): " + "; ".join(no_docker) + ".")
    if errors:
        raise ClusterError(f"the Ray cluster at {address!r} " + " It also ".join(errors))


def _episode_nodes() -> dict[str, str]:
    """Node id -> IP of the live nodes verl places agent-loop workers on (round-robin over those with a CPU)."""
    import ray

    return {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()
            if n.get("Alive") and n["Resources"].get("CPU", 0) > 0}


def _on_every_node(fn: Callable[[], Any], nodes: list[str], timeout_s: float) -> dict[str, Any]:
    """``fn()`` once on each of ``nodes`` (0 CPU, no retry); node id -> its result, for the nodes that answered in
    time (a node lost meanwhile, or too slow, is left out)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    pending = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(): node
               for node in nodes}
    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
    answers = {}
    for ref in ready:
        try:
            answers[pending[ref]] = ray.get(ref)
        except Exception:  # ray's errors for a lost node or a failed task: no answer from that node
            continue
    return answers


def nodes_without_docker(timeout_s: float = 60.0) -> list[str]:
    """Why each node that can host agent-loop workers cannot run sandboxes (empty when all reach a daemon). A node
    that does not answer within ``timeout_s`` is only warned about: a loaded node can be slow to start a worker."""
    nodes = _episode_nodes()
    answers = _on_every_node(_docker_here, list(nodes), timeout_s)
    silent = [f"{nodes[n]} ({n[:8]})" for n in nodes if n not in answers]
    if silent:
        logger.warning("could not ask %s whether a Docker daemon runs there (no answer within %.0f s)",
                       ", ".join(silent), timeout_s)
    return [f"the processes of node {nodes[n]} ({n[:8]}) reach no Docker daemon ({why}); start one there and give "
            "that node's `ray start` its DOCKER_HOST (docs/training.md, \"On a Ray cluster\")"
            for n, why in answers.items() if why]


def _docker_here() -> str | None:
    """None when this process reaches a Docker daemon, else why not (a short line)."""
    import docker

    from seal_envs.sandbox.docker import DOCKER_FAULTS, daemon_address

    try:
        docker.from_env(timeout=10).ping()
    except DOCKER_FAULTS as exc:
        return f"none answers at {daemon_address()}: {str(exc)[:200]}"
    return None


# Ray's words for a lost node: the GCS's (forwarded by the raylets), an actor's (ActorDiedError), a task's
_NODE_DIED = re.compile(r"The node with node id: (\w+) and address: \S+ and node name: \S+ has been marked dead"
                        r"|The actor died because its node has died\. Node Id: (\w+)"
                        r"|Task failed because the node it was running on is dead or unavailable\. Node IP: [^,]*, "
                        r"node ID: (\w+)")


def lost_node(log: str) -> str | None:
    """The id of the Ray node whose death failed the run, as its log (verl's and Ray's output) names it."""
    found = _NODE_DIED.search(log)
    return next(node for node in found.groups() if node) if found else None


# the raylet's summary of its memory monitor's kills, forwarded to the driver
_OOM_KILLS = re.compile(r"(\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\).*?"
                        r"at node \(ID: (\w+), IP: ([^)]+)\)")


def oom_kills(line: str) -> tuple[int, str] | None:
    """(workers killed, node IP) when ``line`` is a raylet's report that its memory monitor killed this job's
    workers. Ray does that when the machine's memory in use passes its threshold (95%), whoever holds it (another
    job, another Ray instance), and retries a killed task without end: verl's first task of a placement group
    (``get_master_addr_port``) then waits for ever, a run that stalls with no error."""
    found = _OOM_KILLS.search(line)
    return (int(found.group(1)), found.group(3)) if found and int(found.group(1)) > 0 else None


def release_sandboxes(timeout_s: float = 60.0) -> dict[str, int]:
    """At the end of a run, on every live node: end the agent-loop workers (their sandboxes' owners), then run
    that node's reaper, so that no container outlives the job on any node, whatever ended it (a finished run, a
    failed step, a lost node). Returns the containers removed per node id; a node that cannot answer is skipped."""
    import ray

    if not ray.is_initialized():
        return {}
    try:
        return _release(timeout_s)
    except Exception:  # cleanup must never fail a finished run or hide why a run failed
        logger.warning("could not release the job's sandboxes; `seal-envs sandbox reap` on each node removes "
                       "what is left", exc_info=True)
        return {}


def _release(timeout_s: float) -> dict[str, int]:
    import ray

    workers = [ray.get_actor(name) for name in ray.util.list_named_actors() if name.startswith(AGENT_LOOP_WORKER)]
    for worker in workers:
        ray.kill(worker, no_restart=True)
    _wait_dead(workers, timeout_s / 2)
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    return _on_every_node(_reap_here, nodes, timeout_s / 2)


def _reap_here() -> int:
    """This node's orphaned sandboxes (their owners were killed just before)."""
    from seal_envs.sandbox.docker import docker_client
    from seal_envs.sandbox.reaper import reap

    try:
        client = docker_client()
    except Exception:
        return 0  # no daemon on this node: it ran no sandbox
    removed = reap(client)
    time.sleep(2)  # a worker of the job that was still exiting (its owner died with the job's task runner)
    return len(removed) + len(reap(client))


def _wait_dead(actors: list, timeout_s: float) -> None:
    import ray

    deadline = time.time() + timeout_s
    for actor in actors:
        while time.time() < deadline:
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=max(0.1, deadline - time.time()))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                break
            time.sleep(0.2)


__all__ = ["ClusterError", "ResourceNeeds", "check_cluster", "cluster_address", "join_cluster", "joining_ray_init",
           "lost_node", "nodes_without_docker", "oom_kills", "release_sandboxes"]
