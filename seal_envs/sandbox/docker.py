"""Docker sandbox: one long-lived, locked-down container per sandbox running the stdlib tool server.

Calls travel as JSON lines over the container's attach socket to the supervisor of ``server.py``, never one
``docker exec`` per call (about 40 ms). The supervisor enforces ``call_timeout_s`` itself and survives tools
that hang, crash or exhaust memory (their episode process is rebuilt). Who is at fault decides
``CallResult.infrastructure``: anything a tool can cause (a hang, a crash, a dead server, a container that
exited) is the tool's failure and is diagnosed; only a container removed from outside, a daemon that errs or
misses its deadline, or a container that cannot start is ours, and such turns are masked out of training.

Containers carry ``seal.*`` labels naming their owner process, so ``reaper.reap`` can remove what a killed
process left behind; they also stop by themselves when the owner dies (stdin closes with the attach socket),
at the latest one call timeout later.
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
from collections.abc import Callable
from typing import Any

import docker
import docker.errors
from docker.types import LogConfig

from seal_envs.sandbox.base import CallResult, Sandbox, SandboxConfig, SandboxError, unreadable_state
from seal_envs.sandbox.image import SERVER_SOURCE, ImageSpec, ground_truth_paths, minimal_cover, resolve_image
from seal_envs.sandbox.reaper import DOCKER_FAULTS, LABEL, owner_labels, remove_containers
from seal_envs.sandbox.server import CALL_REPLY_LIMIT_FACTOR

SERVER_IN_CONTAINER = "/opt/seal/server.py"
START_TIMEOUT_S = 60.0  # first ping: the daemon may be busy starting many containers at once
SNAPSHOT_REPLY_LIMIT = 64 << 20  # states can be large (BFCL file systems); calls are capped far lower
STDERR_TAIL_BYTES = 4096
SUPERVISOR_GRACE_S = 5.0  # beyond a call and its rebuild (two call timeouts): the supervisor itself is stuck


# ------------------------------------------------------------------------------------- per-process client

_client: docker.DockerClient | None = None
_client_lock = threading.Lock()
_live: dict[str, DockerSandbox] = {}  # container id -> sandbox, removed at interpreter exit
_live_lock = threading.Lock()
_extra_mounts: set[str] = set()  # python_paths seen by this process, mounted into every new container
_starts: threading.BoundedSemaphore | None = None  # container starts in flight, see SandboxConfig.max_starts


def _after_fork_in_child() -> None:
    """A forked child (Ray worker, multiprocessing) must not reuse the parent's connection or containers."""
    global _client, _client_lock, _live_lock, _starts
    _client, _client_lock, _live_lock, _starts = None, threading.Lock(), threading.Lock(), None
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def start_slots(limit: int) -> threading.BoundedSemaphore:
    """The process's cap on container starts in flight (the first caller sets it): a daemon asked for
    hundreds at once answers none within its deadline, and every episode waiting on one would be masked."""
    global _starts
    with _client_lock:
        if _starts is None:
            _starts = threading.BoundedSemaphore(limit)
        return _starts


def docker_client(timeout_s: float | None = None) -> docker.DockerClient:
    """This process's Docker client, created on first use (it honours DOCKER_HOST). Every daemon request
    has a deadline of ``timeout_s`` (default ``SandboxConfig.daemon_timeout_s``; the first caller sets it)."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=timeout_s or SandboxConfig.daemon_timeout_s, max_pool_size=256)
                client.ping()
            except DOCKER_FAULTS as exc:
                raise SandboxError(
                    f"Docker daemon not reachable at {daemon_address()} ({exc}): start it with "
                    "`bash .ci/dockerd.sh start` and export DOCKER_HOST=unix:///tmp/seal-docker/docker.sock, "
                    "or set DOCKER_HOST to your daemon (or use SandboxConfig(backend='inprocess') to debug)"
                ) from exc
            _client = client
        return _client


_before_sweep: list[Callable[[], object]] = []


def before_sweep(hook: Callable[[], object]) -> None:
    """Run ``hook`` at exit before this process's containers are removed (the pools stop their prestarts there,
    so that no container starts after the sweep)."""
    if hook not in _before_sweep:
        _before_sweep.append(hook)


def close_all_sandboxes() -> None:
    """Remove every container this process still owns (registered with atexit)."""
    for hook in list(_before_sweep):
        hook()
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


def _error_text(reply: dict[str, Any]) -> str:
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    return f"{error.get('type', 'ProtocolError')}: {error.get('message')}"


# ------------------------------------------------------------------------------------- the sandbox


class DockerSandbox(Sandbox):
    """A tool server in its own container: no network, read-only root, small tmpfs, no capabilities,
    user nobody, memory and process limits."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._client = docker_client(self.config.daemon_timeout_s)
        try:
            self.image: ImageSpec = resolve_image(self._client, self.config.image)
        except DOCKER_FAULTS as exc:
            raise SandboxError(f"could not prepare the sandbox image: {exc}") from exc
        self._lock = threading.Lock()
        self._call_reply_limit = CALL_REPLY_LIMIT_FACTOR * self.config.max_output_bytes + (64 << 10)
        self._request_id = 0
        self.container_id = ""
        with start_slots(self.config.max_starts):
            self._start()

    # -------------------------------------------------------------- container lifecycle

    def _mounts(self) -> tuple[str, ...]:
        return minimal_cover([*self.image.mounts, *_extra_mounts])

    def _masks(self) -> tuple[list[str], dict[str, str]]:
        """Ground truth under the mounts, made unreadable: files shadowed by /dev/null (binds), folders by an
        empty read-only tmpfs."""
        hidden = ground_truth_paths(self._mounted)
        return ([f"{os.devnull}:{path}:ro" for path in hidden if os.path.isfile(path)],
                {path: "ro,size=4k" for path in hidden if os.path.isdir(path)})

    def _start(self) -> None:
        """Create, attach and start the container, then wait for the server's first answer."""
        self._dead: CallResult | None = None
        self._buffer = bytearray()  # raw attach-stream bytes not yet parsed
        self._stdout = bytearray()  # server output not yet split into lines
        self._stderr_tail = b""
        self._mounted = self._mounts()
        api, config = self._client.api, self.config
        binds = [f"{path}:{path}:ro" for path in self._mounted]
        binds.append(f"{SERVER_SOURCE}:{SERVER_IN_CONTAINER}:ro")
        masked_files, masked_folders = self._masks()
        binds += masked_files
        host_config = api.create_host_config(
            binds=binds, network_mode="none", read_only=True,
            tmpfs={"/tmp": f"size={config.tmpfs_size},mode=1777", **masked_folders},
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            mem_limit=config.mem_limit, memswap_limit=config.mem_limit, pids_limit=config.pids_limit,
            nano_cpus=int(config.cpus * 1e9), ipc_mode="none", log_config=LogConfig(type=LogConfig.types.NONE),
        )
        command = [self.image.python, SERVER_IN_CONTAINER, str(config.call_timeout_s), str(config.max_output_bytes),
                   "--sweep"]
        try:
            created = api.create_container(
                self.image.tag, command=command,
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
        if not reply["ok"]:
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

        Only the supervisor writes to this stream, so a reply that is not the JSON object answering this
        request means the sandbox cannot be trusted: it is killed, as after a timeout or a broken stream.
        None of these is marked ``infrastructure`` unless the daemon or an outsider caused it: a tool that
        stops, kills or subverts its supervisor must not be able to turn its failure into a masked turn.
        """
        self._request_id += 1
        deadline = time.monotonic() + timeout_s
        try:
            self._socket.settimeout(timeout_s)
            self._socket.sendall(json.dumps({**request, "id": self._request_id}).encode() + b"\n")
            line = self._read_line(deadline, limit)
        except TimeoutError:  # the supervisor is stuck (a tool stopped it) unless the daemon relaying it is
            frozen = not self._daemon_answers()
            return {"ok": False, "failure": self._kill(CallResult(
                ok=False, error_type="SandboxLost" if frozen else "Timeout", infrastructure=frozen,
                error=f"the sandbox did not answer within {timeout_s:g} s"
                      + (" and the Docker daemon does not answer either" if frozen else "")))}
        except (EOFError, OSError) as exc:
            return {"ok": False, "failure": self._kill(self._diagnose_exit(exc))}
        reply = None
        if line is not None:
            try:
                reply = json.loads(line)
            except (ValueError, RecursionError):
                pass
        if not isinstance(reply, dict) or reply.get("id") != self._request_id or not isinstance(reply.get("ok"), bool):
            shown = "over the size limit" if line is None else repr(line[:200])
            return {"ok": False, "failure": self._kill(CallResult(
                ok=False, error_type="ProtocolError", error=f"the sandbox answered out of protocol: {shown}"))}
        return reply

    def _daemon_answers(self) -> bool:
        try:
            return bool(self._client.ping())
        except DOCKER_FAULTS:
            return False

    def _diagnose_exit(self, exc: BaseException) -> CallResult:
        """Why the stream ended: the tool's fault (OOM, crashed server) or ours (container or daemon gone)."""
        try:
            state = self._client.api.wait(self.container_id, timeout=self.config.daemon_timeout_s)
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
        # An exit (even by SIGKILL) can be the tool's doing: tool code runs as the supervisor's uid
        return CallResult(ok=False, error_type="SandboxCrashed",
                          error=f"the tool server exited with status {code}" + (f": {stderr}" if stderr else ""))

    # -------------------------------------------------------------- Sandbox API

    def _require_alive(self, what: str) -> None:
        if self._dead is not None:
            raise SandboxError(f"cannot {what}: the sandbox is dead ({self._dead.error_type}: {self._dead.error})")

    @property
    def _deadline_s(self) -> float:
        return 2 * self.config.call_timeout_s + SUPERVISOR_GRACE_S

    def _fresh_process(self, request: dict[str, Any], what: str) -> dict[str, Any]:
        """Send a request that starts a fresh episode process (``reset``, ``resolve``) and return its answer.
        Only the supervisor's answer that the domain's code or the task's classes failed is the task's fault
        (``ValueError``); a sandbox that does not answer is ours (``SandboxError``, retried)."""
        paths = [os.path.abspath(str(p)) for p in request["python_paths"]]
        with self._lock:
            self._require_alive(request["op"])
            self._mount(paths)
            reply = self._request({**request, "python_paths": paths}, self._deadline_s, SNAPSHOT_REPLY_LIMIT)
        if reply["ok"]:
            return reply
        if "failure" in reply:
            failure: CallResult = reply["failure"]
            raise SandboxError(f"the sandbox failed trying to {what}: {failure.error_type}: {failure.error}")
        if reply.get("sandbox"):
            raise SandboxError(f"the sandbox cannot start an episode: {_error_text(reply)}")
        raise ValueError(f"cannot {what}: {_error_text(reply)}")

    def reset(self, classes: dict[str, Any], python_paths: list[str] | tuple[str, ...] = (), code: str = "") -> None:
        self._fresh_process({"op": "reset", "classes": classes, "python_paths": list(python_paths), "code": code},
                            "load the task state")

    def resolve(self, targets: list[str], python_paths: list[str] | tuple[str, ...] = (),
                code: str = "") -> dict[str, str]:
        reply = self._fresh_process({"op": "resolve", "targets": list(targets), "python_paths": list(python_paths),
                                     "code": code}, "import the domain's code")
        problems = reply.get("problems")
        if not isinstance(problems, dict):
            raise SandboxError(f"the sandbox answered resolve out of protocol: {reply!r:.200}")
        return {str(k): str(v) for k, v in problems.items()}

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
                                  self._deadline_s, self._call_reply_limit)
            if "failure" in reply:
                return reply["failure"]
            if reply["ok"]:
                text = reply.get("text")
                return CallResult(ok=True, output=reply.get("result"), text=text if isinstance(text, str) else None)
            error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
            result = CallResult(ok=False, error_type=str(error.get("type", "ProtocolError")),
                                error=str(error.get("message")))
            if reply.get("lost"):  # the episode's state could not be rebuilt: the env replays it elsewhere
                self._kill(result)
            return result

    def snapshot(self) -> dict[str, Any]:
        """The episode's state. A tool that broke its own episode process yields an unreadable-state marker
        (the turn then fails on state, the tool's fault); a dead sandbox raises ``SandboxError``."""
        with self._lock:
            self._require_alive("snapshot")
            reply = self._request({"op": "snapshot"}, self._deadline_s, SNAPSHOT_REPLY_LIMIT)
        if reply["ok"] and isinstance(reply.get("state"), dict):
            return reply["state"]
        if "failure" in reply:
            failure: CallResult = reply["failure"]
            raise SandboxError(f"could not snapshot the sandbox state: {failure.error_type}: {failure.error}")
        return unreadable_state(_error_text(reply))
