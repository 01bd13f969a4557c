"""Docker sandbox: one long-lived, locked-down container per sandbox running the stdlib tool server.

Calls travel as JSON lines over the container's attach socket (about 0.1 ms), never one ``docker exec``
per call (about 40 ms). A call that outlives ``call_timeout_s`` kills the container: the sandbox is then
dead (``alive`` is False) and the pool replaces it. Who is at fault decides ``CallResult.infrastructure``:
a tool that hangs, exhausts memory or crashes its server is the tool's failure; a container that vanished
or a daemon that errs is ours, and such turns are masked out of training.

Containers carry ``seal.*`` labels naming their owner process, so ``reaper.reap`` can remove what a killed
process left behind; they also stop by themselves when the owner dies (stdin closes with the attach socket).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util
import os
import socket
import struct
import threading
import time
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig

from seal_envs.sandbox.base import CallResult, Sandbox, SandboxConfig, SandboxError
from seal_envs.sandbox.image import SERVER_SOURCE, ImageSpec, minimal_cover, resolve_image
from seal_envs.sandbox.reaper import LABEL, owner_labels

SERVER_IN_CONTAINER = "/opt/seal/server.py"
START_TIMEOUT_S = 60.0  # first ping: the daemon may be busy starting many containers at once
SNAPSHOT_REPLY_LIMIT = 64 << 20  # states can be large (BFCL file systems); calls are capped far lower
STDERR_TAIL_BYTES = 4096
RESOURCE_ERRORS = ("MemoryError", "BlockingIOError")  # a tool exhausted the limits: do not reuse the container
DOCKER_FAULTS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


# ------------------------------------------------------------------------------------- per-process client

_client: docker.DockerClient | None = None
_client_lock = threading.Lock()
_live: dict[str, DockerSandbox] = {}  # container id -> sandbox, removed at interpreter exit
_live_lock = threading.Lock()
_extra_mounts: set[str] = set()  # python_paths seen by this process, mounted into every new container


def _after_fork_in_child() -> None:
    """A forked child (Ray worker, multiprocessing) must not reuse the parent's connection or containers."""
    global _client, _client_lock, _live_lock
    _client, _client_lock, _live_lock = None, threading.Lock(), threading.Lock()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client() -> docker.DockerClient:
    """This process's Docker client, created on first use (it honours DOCKER_HOST)."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=120, max_pool_size=256)
                client.ping()
            except DOCKER_FAULTS as exc:
                raise SandboxError(
                    f"Docker daemon not reachable at {daemon_address()} ({exc}): start it with "
                    "`bash .ci/dockerd.sh start` and export DOCKER_HOST=unix:///tmp/seal-docker/docker.sock, "
                    "or set DOCKER_HOST to your daemon (or use SandboxConfig(backend='inprocess') to debug)"
                ) from exc
            _client = client
        return _client


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


def close_all_sandboxes() -> None:
    """Remove every container this process still owns (registered with atexit)."""
    from seal_envs.sandbox.pool import close_all_pools

    close_all_pools()  # first stop the pools' prestarts, so no container starts after this sweep
    with _live_lock:
        sandboxes = list(_live.values())
        _live.clear()
    for sandbox in sandboxes:
        sandbox._mark_dead(sandbox._dead)
    if sandboxes:
        remove_containers(sandboxes[0]._client, [s.container_id for s in sandboxes])


atexit.register(close_all_sandboxes)
_exit_hook_pid = 0


def _register_exit_hook() -> None:
    """Also clean up in multiprocessing children, which leave by ``os._exit`` and skip atexit."""
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():
        _exit_hook_pid = os.getpid()
        multiprocessing.util.Finalize(None, close_all_sandboxes, exitpriority=100)


# ------------------------------------------------------------------------------------- the sandbox


class DockerSandbox(Sandbox):
    """A tool server in its own container: no network, read-only root, small tmpfs, no capabilities,
    user nobody, memory and process limits."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._client = docker_client()
        try:
            self.image: ImageSpec = resolve_image(self._client, self.config.image)
        except DOCKER_FAULTS as exc:
            raise SandboxError(f"could not prepare the sandbox image: {exc}") from exc
        self._lock = threading.Lock()
        self._call_reply_limit = 24 * self.config.max_output_bytes + (64 << 10)  # result and text; JSON escaping grows them
        self.container_id = ""
        self._start()

    # -------------------------------------------------------------- container lifecycle

    def _mounts(self) -> tuple[str, ...]:
        return minimal_cover([*self.image.mounts, *_extra_mounts])

    def _start(self) -> None:
        """Create, attach and start the container, then wait for the server's first answer."""
        self._dead: CallResult | None = None
        self._buffer = bytearray()  # raw attach-stream bytes not yet parsed
        self._stdout = bytearray()  # server output not yet split into lines
        self._stderr_tail = b""
        self._mounted = self._mounts()
        api, config = self._client.api, self.config
        binds = {path: {"bind": path, "mode": "ro"} for path in self._mounted}
        binds[str(SERVER_SOURCE)] = {"bind": SERVER_IN_CONTAINER, "mode": "ro"}
        host_config = api.create_host_config(
            binds=binds, network_mode="none", read_only=True,
            tmpfs={"/tmp": f"size={config.tmpfs_size},mode=1777"},
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            mem_limit=config.mem_limit, memswap_limit=config.mem_limit, pids_limit=config.pids_limit,
            ipc_mode="none", log_config=LogConfig(type=LogConfig.types.NONE),
        )
        try:
            created = api.create_container(
                self.image.tag, command=[self.image.python, SERVER_IN_CONTAINER, str(config.max_output_bytes)],
                user="65534:65534", working_dir="/tmp", stdin_open=True, detach=False,  # StdinOnce: exit with us
                labels={LABEL: "1", **owner_labels()}, host_config=host_config, network_disabled=True,
                environment={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUTF8": "1"},
            )
            self.container_id = created["Id"]
            with _live_lock:
                _live[self.container_id] = self
                _register_exit_hook()
            self._response = api.attach_socket(self.container_id, params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                                         "stream": 1})
            self._socket: socket.socket = getattr(self._response, "_sock", self._response)
            api.start(self.container_id)
        except DOCKER_FAULTS as exc:
            self.close()
            raise SandboxError(f"could not start a sandbox container from {self.image.tag}: {exc}") from exc
        reply = self._request({"op": "ping"}, START_TIMEOUT_S, self._call_reply_limit)
        if not reply.get("ok"):
            self.close()
            failure = reply.get("failure")
            detail = f"{failure.error_type}: {failure.error}" if failure else reply.get("error")
            raise SandboxError(f"the tool server did not start in {self.image.tag} ({detail}); server stderr: "
                               f"{self._stderr_tail.decode(errors='replace').strip() or '(empty)'}")

    def _mark_dead(self, cause: CallResult | None) -> None:
        self._dead = cause or CallResult(ok=False, error_type="SandboxClosed", error="the sandbox was closed",
                                         infrastructure=True)

    def _kill(self, cause: CallResult) -> CallResult:
        """Stop a container we can no longer trust (hung, over its limits); returns ``cause``."""
        self._mark_dead(cause)
        self._remove()
        return cause

    def _remove(self) -> None:
        with _live_lock:
            owned = _live.pop(self.container_id, None) is self
        try:
            self._socket.close()
        except (AttributeError, OSError):
            pass
        if owned:
            remove_containers(self._client, [self.container_id])

    def close(self) -> None:
        """Remove the container. Idempotent."""
        self._mark_dead(self._dead)
        self._remove()

    @property
    def alive(self) -> bool:
        return self._dead is None

    # -------------------------------------------------------------- the wire protocol

    def _recv(self, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self._socket.settimeout(remaining)  # poll() underneath: no FD_SETSIZE limit as with select()
        data = self._socket.recv(1 << 16)
        if not data:
            raise EOFError
        return data

    def _read_line(self, deadline: float, limit: int) -> bytes | None:
        """The server's next stdout line; None when it exceeded ``limit`` (the rest is drained)."""
        overflow = False
        while True:
            newline = self._stdout.find(b"\n")
            if newline >= 0:
                line = bytes(self._stdout[:newline])
                del self._stdout[: newline + 1]
                return None if overflow else line
            if len(self._stdout) > limit:
                overflow = True
                self._stdout.clear()
            while len(self._buffer) < 8 or len(self._buffer) < 8 + struct.unpack(">I", self._buffer[4:8])[0]:
                self._buffer += self._recv(deadline)
            stream, size = self._buffer[0], struct.unpack(">I", self._buffer[4:8])[0]
            payload = bytes(self._buffer[8 : 8 + size])
            del self._buffer[: 8 + size]
            if stream == 1:
                self._stdout += payload
            elif stream == 2:
                self._stderr_tail = (self._stderr_tail + payload)[-STDERR_TAIL_BYTES:]

    def _request(self, request: dict[str, Any], timeout_s: float, limit: int) -> dict[str, Any]:
        """Send one request and read its reply; failures become ``{"ok": False, "failure": CallResult}``.

        A timeout or broken stream leaves the container killed and the sandbox dead.
        """
        deadline = time.monotonic() + timeout_s
        try:
            self._socket.settimeout(timeout_s)
            self._socket.sendall(json.dumps(request).encode() + b"\n")
            line = self._read_line(deadline, limit)
        except TimeoutError:
            return {"ok": False, "failure": self._kill(CallResult(
                ok=False, error_type="Timeout", error=f"the call did not finish within {timeout_s:g} s"))}
        except (EOFError, OSError) as exc:
            return {"ok": False, "failure": self._kill(self._diagnose_exit(exc))}
        if line is None:
            return {"ok": False, "failure": CallResult(
                ok=False, error_type="OutputTooLarge", error=f"the reply exceeded {limit} bytes")}
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"ok": False, "failure": self._kill(CallResult(
                ok=False, error_type="ProtocolError",
                error=f"the tool wrote to the server's reply channel: {line[:200]!r}"))}

    def _diagnose_exit(self, exc: BaseException) -> CallResult:
        """Why the stream ended: the tool's fault (OOM, crashed server) or ours (container or daemon gone)."""
        try:
            state = self._client.api.wait(self.container_id, timeout=10)
            info = self._client.api.inspect_container(self.container_id)["State"]
        except docker.errors.NotFound:
            return CallResult(ok=False, error_type="SandboxLost", infrastructure=True,
                              error="the sandbox container was removed from outside")
        except DOCKER_FAULTS as err:
            return CallResult(ok=False, error_type="SandboxLost", infrastructure=True,
                              error=f"the Docker daemon failed while the call ran ({exc!r}; {err!r})")
        code = state.get("StatusCode", info.get("ExitCode"))
        stderr = self._stderr_tail.decode(errors="replace").strip()[-500:]
        if info.get("OOMKilled"):
            return CallResult(ok=False, error_type="OutOfMemory",
                              error=f"the tool exceeded the sandbox memory limit ({self.config.mem_limit})")
        if code == 137:  # SIGKILL without an OOM record: someone outside killed the container
            return CallResult(ok=False, error_type="SandboxLost", infrastructure=True,
                              error="the sandbox container was killed from outside")
        return CallResult(ok=False, error_type="SandboxCrashed",
                          error=f"the tool server exited with status {code}" + (f": {stderr}" if stderr else ""))

    # -------------------------------------------------------------- Sandbox API

    def _require_alive(self, what: str) -> None:
        if self._dead is not None:
            raise SandboxError(f"cannot {what}: the sandbox is dead ({self._dead.error_type}: {self._dead.error})")

    def reset(self, classes: dict[str, Any], python_paths: list[str] | tuple[str, ...] = ()) -> None:
        paths = [os.path.abspath(str(p)) for p in python_paths]
        with self._lock:
            self._require_alive("reset")
            self._mount(paths)
            reply = self._request({"op": "reset", "classes": classes, "python_paths": paths},
                                  self.config.call_timeout_s, SNAPSHOT_REPLY_LIMIT)
        if reply.get("ok"):
            return
        if "failure" in reply:
            failure: CallResult = reply["failure"]
            if failure.infrastructure:
                raise SandboxError(f"the sandbox failed while loading the task state: {failure.error}")
            raise ValueError(f"cannot load the task state: {failure.error_type}: {failure.error}")
        raise ValueError(f"cannot load the task state: {reply['error']['type']}: {reply['error']['message']}")

    def _mount(self, paths: list[str]) -> None:
        """Make ``paths`` visible in the container: new ones are added to every later container, and this one
        is restarted with them (once per new domain and warm container)."""
        missing = [p for p in paths if os.path.exists(p) and minimal_cover([*self._mounted, p]) != self._mounted]
        if not missing:
            return
        for path in missing:
            if os.stat(path).st_mode & 0o005 != 0o005:
                raise ValueError(f"python path {path} is not readable by the sandbox user (nobody): "
                                 f"`chmod o+rx {path}` (and o+r on its files)")
        _extra_mounts.update(missing)
        self.close()
        self._start()

    def call(self, target: str, arguments: dict[str, Any]) -> CallResult:
        with self._lock:
            if self._dead is not None:
                return CallResult(ok=False, error_type=self._dead.error_type, infrastructure=self._dead.infrastructure,
                                  error=f"the sandbox is dead since an earlier call: {self._dead.error}")
            reply = self._request({"op": "call", "target": target, "arguments": arguments},
                                  self.config.call_timeout_s, self._call_reply_limit)
            if "failure" in reply:
                return reply["failure"]
            if reply.get("ok"):
                return CallResult(ok=True, output=reply["result"], text=reply.get("text"))
            error = reply.get("error") or {}
            result = CallResult(ok=False, error_type=error.get("type", "ProtocolError"), error=error.get("message"))
            if result.error_type in RESOURCE_ERRORS:  # forks or memory used up: the container cannot be trusted
                self._kill(result)
            return result

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            self._require_alive("snapshot")
            reply = self._request({"op": "snapshot"}, self.config.call_timeout_s, SNAPSHOT_REPLY_LIMIT)
        if reply.get("ok"):
            return reply["state"]
        failure = reply.get("failure")
        error = reply.get("error") or {}
        detail = f"{failure.error_type}: {failure.error}" if failure else f"{error.get('type')}: {error.get('message')}"
        raise SandboxError(f"could not snapshot the sandbox state: {detail}")
