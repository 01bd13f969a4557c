"""Remove sandbox containers whose owner process is gone (killed with SIGKILL, crashed, OOM-killed).

Every container is labelled with its owner's host (hostname, boot id and PID namespace: two containers or
hosts sharing a daemon never reap each other), pid and process start time (the start time guards against a
reused pid). The pool runs ``reap`` when it is created; ``seal-envs sandbox reap`` runs it by hand.
"""

from __future__ import annotations

import os
import socket
import threading
from functools import lru_cache

import docker
import docker.errors
import requests.exceptions

DOCKER_FAULTS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)  # a daemon request's
LABEL = "seal.sandbox"
OWNER_PID, OWNER_START, OWNER_HOST = "seal.owner_pid", "seal.owner_start", "seal.owner_host"


def process_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@lru_cache(maxsize=None)
def host_id() -> str:
    """Where our pids mean something: hostname, boot id and PID namespace. Processes that share a daemon but
    not all three cannot see each other's pids, so none may judge the other's containers orphaned."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = "unknown-boot"
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = "unknown-pidns"
    return f"{socket.gethostname()}/{boot_id}/{namespace}"


def owner_labels() -> dict[str, str]:
    """The labels that tie a new container to the calling process."""
    pid = os.getpid()
    return {OWNER_PID: str(pid), OWNER_START: process_start_time(pid) or "", OWNER_HOST: host_id()}


def owner_alive(labels: dict[str, str]) -> bool:
    try:
        pid = int(labels.get(OWNER_PID, ""))
    except ValueError:
        return False
    start = process_start_time(pid)
    return start is not None and start == labels.get(OWNER_START, start)


def orphans(client: docker.DockerClient) -> list[str]:
    """Ids of this host's sandbox containers (running or exited) whose owner process no longer exists."""
    listed = client.api.containers(all=True, filters={"label": [f"{LABEL}=1", f"{OWNER_HOST}={host_id()}"]})
    return [c["Id"] for c in listed if not owner_alive(c.get("Labels") or {})]


def reap(client: docker.DockerClient) -> list[str]:
    """Remove the orphaned sandbox containers of this host; returns their ids."""
    found = orphans(client)
    remove_containers(client, found)
    return found


def remove_containers(client: docker.DockerClient, container_ids: list[str]) -> None:
    """Force-remove containers in parallel (one by one, 64 would take seconds)."""
    def remove(container_id: str) -> None:
        try:
            client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except DOCKER_FAULTS:
            pass  # the reaper removes it later
    threads = [threading.Thread(target=remove, args=(cid,), daemon=True) for cid in container_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
