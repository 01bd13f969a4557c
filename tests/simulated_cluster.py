"""A multi-node Ray cluster on one machine, each node with its own Docker daemon (tests and benchmarks).

``ray.cluster_utils.Cluster`` starts a head and worker nodes as separate raylets; each node's processes get
``DOCKER_HOST`` of a daemon started for that node only (``.ci/dockerd.sh`` with its own ``SEAL_DOCKER_DIR``), as
on a real cluster where every machine runs its own daemon. The first node is the head and carries the Ray
``GPU`` slot SEAL's CPU mode trains on. Everything started here is stopped and removed on exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
DOCKERD = ROOT / ".ci" / "dockerd.sh"
SANDBOX_LABEL = "seal.sandbox=1"
HEAD_START_ATTEMPTS = 3


def can_start_daemons() -> bool:
    """Starting dockerd needs root and the binary (CI has both)."""
    return os.geteuid() == 0 and shutil.which("dockerd") is not None


@dataclass
class SimNode:
    node_id: str
    docker_host: str
    docker_dir: str
    ray_node: object  # ray._private.node.Node: its raylet and workers

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.docker_host, timeout=30)

    def sandboxes(self) -> list[dict]:
        """SEAL sandbox containers on this node's daemon, running or exited."""
        return self.client().api.containers(all=True, filters={"label": [SANDBOX_LABEL]})

    def sandboxes_created(self, since: float) -> set[str]:
        """Ids of the SEAL sandbox containers this node's daemon created since ``since`` (a time.time())."""
        events = self.client().events(since=int(since), until=int(time.time()) + 1, decode=True,
                                      filters={"type": "container", "event": "create", "label": SANDBOX_LABEL})
        return {event["id"] for event in events}


class SimulatedCluster:
    """``with SimulatedCluster(3) as cluster:`` -> ``cluster.address``, ``cluster.nodes[i]`` (head first)."""

    def __init__(self, nodes: int, head_cpus: int = 8, worker_cpus: int = 2, head_gpus: int = 1):
        self.size, self.head_cpus, self.worker_cpus, self.head_gpus = nodes, head_cpus, worker_cpus, head_gpus
        self.nodes: list[SimNode] = []
        self.cluster = None
        self._dirs: list[str] = []

    @property
    def address(self) -> str:
        return self.cluster.address

    def _daemon(self) -> tuple[str, str]:
        folder = tempfile.mkdtemp(prefix="sn", dir="/tmp")  # short: the socket path is limited to 108 bytes
        self._dirs.append(folder)
        started = subprocess.run(["bash", str(DOCKERD), "start"], env={**os.environ, "SEAL_DOCKER_DIR": folder},
                                 capture_output=True, text=True, timeout=60)
        if started.returncode != 0:
            raise RuntimeError(f"dockerd for a simulated node did not start: {started.stderr[-2000:]}")
        return started.stdout.strip(), folder

    def __enter__(self) -> "SimulatedCluster":
        from ray.cluster_utils import Cluster

        try:
            daemons = [self._daemon() for _ in range(self.size)]
            head = dict(num_cpus=self.head_cpus, num_gpus=self.head_gpus, include_dashboard=False,
                        env_vars={"DOCKER_HOST": daemons[0][0]})
            for attempt in range(HEAD_START_ATTEMPTS):
                try:
                    self.cluster = Cluster(initialize_head=True, head_node_args=head)
                    break
                except Exception:  # Ray gives a head 30 s to register; a loaded machine can miss that
                    if attempt == HEAD_START_ATTEMPTS - 1:
                        raise
            started = [self.cluster.head_node] + [
                self.cluster.add_node(num_cpus=self.worker_cpus, env_vars={"DOCKER_HOST": host})
                for host, _ in daemons[1:]]
            self.cluster.wait_for_nodes()
            self.nodes = [SimNode(node.node_id, host, folder, node) for node, (host, folder) in zip(started, daemons)]
        except BaseException:
            self.__exit__()
            raise
        return self

    def nodes_hosting(self, actor_class: str) -> set[str]:
        """Ids of the nodes where a live actor of class ``actor_class`` runs (the GCS's actor table)."""
        actors = self.cluster.global_state.actor_table(None).values()
        return {a["Address"]["NodeID"] for a in actors
                if a["ActorClassName"].rsplit(".", 1)[-1] == actor_class and a["State"] == "ALIVE"}

    def kill_node(self, index: int) -> None:
        """Lose a worker node as a machine is lost: its raylet and every process on it killed (its daemon stays)."""
        self.cluster.remove_node(self.nodes[index].ray_node, allow_graceful=False)

    def __exit__(self, *exc) -> None:
        import ray

        try:
            if self.cluster is not None:
                ray.shutdown()  # a driver still connected would keep the head from stopping
                self.cluster.shutdown()
                self.cluster = None
        finally:
            self._stop_daemons()

    def _stop_daemons(self) -> None:
        for folder in self._dirs:  # stopping a daemon also ends whatever still runs in it
            subprocess.run(["bash", str(DOCKERD), "stop"], env={**os.environ, "SEAL_DOCKER_DIR": folder},
                           capture_output=True, timeout=60)
            shutil.rmtree(folder, ignore_errors=True)
        self._dirs.clear()
