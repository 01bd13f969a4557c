"""Docker sandbox: one long-lived, locked-down container per sandbox running the stdlib tool server.

Calls travel as JSON lines over a unix socket the host listens on, in a folder of its own (mode 0700) mounted
into the container: the supervisor of ``server.py`` (root in the container, with only the capabilities it
needs) connects to it; tool code runs as nobody and can reach neither the folder nor the supervisor. The
daemon is not on the call path (no attach stream, no ``docker exec``). The supervisor enforces
``call_timeout_s`` itself and survives tools that hang, crash or exhaust memory (their episode process is
rebuilt). Who is at fault decides
``CallResult.infrastructure``: anything a tool can cause (a hang, a crash, a dead server, a container that
exited) is the tool's failure and is diagnosed; only a container removed from outside, a daemon that errs or
misses its deadline, or a container that cannot start is ours, and such turns are masked out of training.

Containers carry ``seal.*`` labels naming their owner process, so ``reaper.reap`` can remove what a killed
process left behind; they also stop by themselves when the owner dies (the socket closes with it), at the
latest one call timeout later.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import docker
import docker.errors
from docker.types import LogConfig, Mount

from seal_envs.sandbox.base import CallResult, Sandbox, SandboxConfig, SandboxError, unreadable_state
from seal_envs.sandbox.image import (SERVER_SOURCE, ImageSpec, domain_folders, ground_truth_paths, minimal_cover,
                                     resolve_image, tool_module_paths)
from seal_envs.sandbox.reaper import DOCKER_FAULTS, LABEL, owner_labels, remove_containers
from seal_envs.sandbox.server import CALL_REPLY_LIMIT_FACTOR, SNAPSHOT_LIMIT, checked_reply

SERVER_IN_CONTAINER = "/opt/seal/server.py"
CHANNEL_IN_CONTAINER = "/run/seal"  # the host's socket folder, mounted here
SOCKET_NAME = "s"
START_TIMEOUT_S = 60.0  # first connection: the daemon may be busy starting many containers at once
START_CHECK_S = 2.0  # while waiting for it, how often to ask whether the container already exited
SNAPSHOT_REPLY_LIMIT = 64 << 20  # states can be large (BFCL file systems); calls are capped far lower
SUPERVISOR_GRACE_S = 5.0  # beyond a call and its rebuild (two call timeouts): the supervisor itself is stuck
PING_TIMEOUT_S = 2.0  # is the daemon frozen? asked after a missed deadline, bounded so a step stays bounded
EXIT_DIAGNOSIS_S = 5.0  # asking the daemon why a container exited
SANDBOX_CAPABILITIES = ["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"]  # the supervisor's (root's); tools have none
TOOL_UID = 65534  # nobody


class _Failed(Exception):
    """A request that got no valid reply; ``result`` says why and whose fault it is."""

    def __init__(self, result: CallResult):
        super().__init__(result.error)
        self.result = result


# ------------------------------------------------------------------------------------- per-process client

_client: docker.DockerClient | None = None
_client_lock = threading.Lock()
_live: dict[str, DockerSandbox] = {}  # container id -> sandbox, removed at interpreter exit
_live_lock = threading.Lock()
_tool_modules: set[str] = set()  # domains' tool modules seen by this process, mounted into every new container
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


def _under(path: str, folders: tuple[str, ...] | list[str]) -> bool:
    """Whether ``path`` is one of ``folders`` or inside one."""
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _error_text(reply: dict[str, Any]) -> str:
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    return f"{error.get('type', 'ProtocolError')}: {error.get('message')}"


# ------------------------------------------------------------------------------------- the sandbox


class DockerSandbox(Sandbox):
    """A tool server in its own container: no network, read-only root, small tmpfs, tool code as nobody with
    no capabilities, memory and process limits, private IPC namespace."""

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

    def _mounts(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What to bind (the image's mounts and the tool modules seen so far) and which domain folders under
        the image's mounts to shadow: a domain folder shows tool code only the modules its tools name."""
        base = minimal_cover(self.image.mounts)
        shadows = domain_folders(base)
        modules = [m for m in minimal_cover(_tool_modules) if os.path.exists(m)
                   and (not _under(m, base) or _under(m, shadows))]
        return (*base, *modules), shadows

    def _shows(self, path: str) -> bool:
        """Whether ``path`` is visible in this container."""
        return path in self._mounted or (_under(path, self._mounted) and not _under(path, self._shadows))

    def _masks(self) -> tuple[list[Mount], dict[str, str]]:
        """Ground truth under the mounts, made unreadable: domain folders and answer folders by an empty
        read-only tmpfs, task files in what is still shown by /dev/null."""
        hidden = [p for p in ground_truth_paths(self._mounted) if not _under(p, self._shadows)]
        return ([Mount(path, os.devnull, type="bind", read_only=True) for path in hidden if os.path.isfile(path)],
                {path: "ro,size=4k" for path in [*hidden, *self._shadows] if os.path.isdir(path)})

    def _start(self) -> None:
        """Create and start the container, then wait for its supervisor to connect to our socket.

        Binds use the ``Mounts`` API: a source folder that vanished (a deleted domain) fails the start
        instead of being recreated by the daemon as an empty root-owned folder."""
        self._dead: CallResult | None = None
        self._buffer = bytearray()  # bytes received and not yet split into lines
        self._mounted, self._shadows = self._mounts()
        self._inodes = {path: os.stat(path).st_ino for path in self._mounted if os.path.isfile(path)}
        api, config = self._client.api, self.config
        channel_dir = tempfile.mkdtemp(prefix="seal-sb-")  # 0700: nobody in the container cannot enter
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(os.path.join(channel_dir, SOCKET_NAME))
        listener.listen(1)
        mounts = [Mount(path, path, type="bind", read_only=True) for path in self._mounted]
        mounts.append(Mount(SERVER_IN_CONTAINER, str(SERVER_SOURCE), type="bind", read_only=True))
        mounts.append(Mount(CHANNEL_IN_CONTAINER, channel_dir, type="bind", read_only=True))
        masked_files, masked_folders = self._masks()
        host_config = api.create_host_config(
            mounts=mounts + masked_files, network_mode="none", read_only=True,
            tmpfs={"/tmp": f"size={config.tmpfs_size},mode=1777", **masked_folders},
            cap_drop=["ALL"], cap_add=SANDBOX_CAPABILITIES, security_opt=["no-new-privileges"], init=True,
            mem_limit=config.mem_limit, memswap_limit=config.mem_limit, pids_limit=config.pids_limit,
            nano_cpus=int(config.cpus * 1e9), ipc_mode="none", log_config=LogConfig(type=LogConfig.types.NONE),
        )
        command = [self.image.python, SERVER_IN_CONTAINER, str(config.call_timeout_s), str(config.max_output_bytes),
                   "--sweep", "--tool-user", str(TOOL_UID),
                   "--connect", f"{CHANNEL_IN_CONTAINER}/{SOCKET_NAME}"]
        try:
            created = api.create_container(
                self.image.tag, command=command, user="0:0", working_dir="/tmp",
                labels={LABEL: "1", **owner_labels()}, host_config=host_config, network_disabled=True,
                environment={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUTF8": "1"},
            )
            self.container_id = created["Id"]
            with _live_lock:
                _live[self.container_id] = self
                _register_exit_hook()
            api.start(self.container_id)
            self._socket = self._accept(listener)
        except (DOCKER_FAULTS + (TimeoutError,)) as exc:
            self.close()
            raise SandboxError(f"could not start a sandbox container from {self.image.tag}: {exc}") from exc
        finally:
            listener.close()
            shutil.rmtree(channel_dir, ignore_errors=True)  # connected (or failed): nobody needs it now
        try:
            self._request({"op": "ping"}, START_TIMEOUT_S, self._call_reply_limit)
        except _Failed as failed:
            self.close()
            raise SandboxError(f"the tool server did not start in {self.image.tag} ({failed.result.error_type}: "
                               f"{failed.result.error})") from None

    def _accept(self, listener: socket.socket) -> socket.socket:
        """The supervisor's connection; TimeoutError when it does not come, or the container exited first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            listener.settimeout(max(0.001, min(START_CHECK_S, deadline - time.monotonic())))
            try:
                connection, _ = listener.accept()
                return connection
            except TimeoutError:
                state = self._client.api.inspect_container(self.container_id)["State"]
                if not state.get("Running") or time.monotonic() >= deadline:
                    raise TimeoutError(f"its tool server did not connect within {START_TIMEOUT_S:g} s "
                                       f"(container {state.get('Status')}, exit code {state.get('ExitCode')}, "
                                       f"{state.get('Error') or 'no error'})") from None

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

    def _read_line(self, deadline: float, limit: int) -> bytes | None:
        """The supervisor's next line; None when it exceeded ``limit``."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return line if len(line) <= limit else None
            if len(self._buffer) > limit:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._socket.settimeout(remaining)  # poll() underneath: no FD_SETSIZE limit as with select()
            data = self._socket.recv(1 << 16)
            if not data:
                raise EOFError
            self._buffer += data

    def _request(self, request: dict[str, Any], timeout_s: float, limit: int,
                 flags: tuple[str, ...] = ()) -> dict[str, Any]:
        """Send one request and return its reply, checked against the op's schema; raises ``_Failed``.

        Only the supervisor writes to this socket, so a reply that is not the one answering this request
        means the sandbox cannot be trusted: it is killed, as after a timeout or a broken stream. None of
        these is marked ``infrastructure`` unless the daemon or an outsider caused it: nothing a tool does
        to its own sandbox may turn its failure into a masked turn.
        """
        self._request_id += 1
        deadline = time.monotonic() + timeout_s
        try:
            self._socket.settimeout(timeout_s)
            self._socket.sendall(json.dumps({**request, "id": self._request_id}).encode() + b"\n")
            line = self._read_line(deadline, limit)
        except TimeoutError:  # the supervisor is starved (a tool's CPU load) unless the daemon is frozen
            frozen = not self._daemon_answers()
            raise _Failed(self._kill(CallResult(
                ok=False, error_type="SandboxLost" if frozen else "Timeout", infrastructure=frozen,
                error=f"the sandbox did not answer within {timeout_s:g} s"
                      + (" and the Docker daemon does not answer either" if frozen else "")))) from None
        except (EOFError, OSError) as exc:
            raise _Failed(self._kill(self._diagnose_exit(exc))) from None
        try:
            reply = json.loads(line) if line is not None else None
            if not isinstance(reply, dict) or reply.pop("id", None) != self._request_id:
                raise ValueError("not the reply to this request")
            return checked_reply(request["op"], reply, self._call_reply_limit, flags)
        except (ValueError, RecursionError) as exc:
            shown = "over the size limit" if line is None else f"{exc}: {line[:200]!r}"
            raise _Failed(self._kill(CallResult(
                ok=False, error_type="ProtocolError", error=f"the sandbox answered out of protocol ({shown})"))) from None

    def _daemon_answers(self) -> bool:
        api = self._client.api
        try:
            return api._result(api._get(api._url("/_ping"), timeout=PING_TIMEOUT_S)) == "OK"
        except DOCKER_FAULTS:
            return False

    def _diagnose_exit(self, exc: BaseException) -> CallResult:
        """Why the stream ended: the tool's fault (OOM, crashed server) or ours (container or daemon gone)."""
        api = self._client.api
        try:
            info = api._result(api._get(api._url("/containers/{0}/json", self.container_id),
                                        timeout=EXIT_DIAGNOSIS_S), json=True)["State"]
            if info.get("Running"):  # the exit is on its way: give it a moment, bounded
                time.sleep(0.1)
                info = api._result(api._get(api._url("/containers/{0}/json", self.container_id),
                                            timeout=EXIT_DIAGNOSIS_S), json=True)["State"]
        except docker.errors.NotFound:
            return CallResult(ok=False, error_type="SandboxLost", infrastructure=True,
                              error="the sandbox container was removed from outside")
        except DOCKER_FAULTS as err:
            return CallResult(ok=False, error_type="SandboxLost", infrastructure=True,
                              error=f"the Docker daemon failed while the call ran ({exc!r}; {err!r})")
        if info.get("OOMKilled"):
            return CallResult(ok=False, error_type="OutOfMemory",
                              error=f"the tool exceeded the sandbox memory limit ({self.config.mem_limit})")
        # whatever else ended it happened inside the sandbox, where only tool code runs besides ours
        return CallResult(ok=False, error_type="SandboxCrashed",
                          error=f"the tool server's connection ended (container {info.get('Status')}, exit code "
                                f"{info.get('ExitCode')})")

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
        (``ValueError``), and so is a request too large to send; a sandbox that does not answer is ours
        (``SandboxError``, retried)."""
        paths = [os.path.abspath(str(p)) for p in request["python_paths"]]
        request = {**request, "python_paths": paths}
        size = len(json.dumps(request))
        if size > SNAPSHOT_LIMIT - 1024:
            raise ValueError(f"cannot {what}: the request is {size} bytes, over the sandbox's limit of "
                             f"{SNAPSHOT_LIMIT - 1024} (a task state this large cannot be loaded)")
        with self._lock:
            self._require_alive(request["op"])
            self._mount(tool_module_paths(paths, [*request.get("classes", {}), *request.get("targets", ())]))
            try:
                reply = self._request(request, self._deadline_s, SNAPSHOT_REPLY_LIMIT, flags=("sandbox",))
            except _Failed as failed:
                raise SandboxError(f"the sandbox failed trying to {what}: {failed.result.error_type}: "
                                   f"{failed.result.error}") from None
        if reply["ok"]:
            return reply
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
        return dict(reply["problems"])

    def _mount(self, modules: tuple[str, ...]) -> None:
        """Make a domain's tool modules visible in the container (nothing else of its folder): new ones are
        added to every later container, and this one is restarted with them (once per new domain and warm
        container)."""
        missing = [m for m in modules if not self._shows(m)]
        replaced = [m for m in modules if m in self._inodes and os.stat(m).st_ino != self._inodes[m]]
        if not missing and not replaced:  # a bind pins a file's inode: a file replaced on disk needs a restart
            return
        for path in missing:
            wanted = 0o005 if os.path.isdir(path) else 0o004
            if os.stat(path).st_mode & wanted != wanted:
                raise ValueError(f"tool module {path} is not readable by the sandbox user (nobody): "
                                 f"`chmod o+rx` its folders and o+r its files")
        _tool_modules.update(missing)
        self.close()
        self._start()

    def call(self, target: str, arguments: dict[str, Any], timeout_s: float | None = None) -> CallResult:
        with self._lock:
            if self._dead is not None:
                return CallResult(ok=False, error_type=self._dead.error_type, infrastructure=self._dead.infrastructure,
                                  error=f"the sandbox is dead since an earlier call: {self._dead.error}")
            request: dict[str, Any] = {"op": "call", "target": target, "arguments": arguments}
            deadline_s = self._deadline_s
            if timeout_s is not None:
                request["timeout_s"] = max(0.0, timeout_s)
                deadline_s = min(deadline_s, max(0.0, timeout_s) + SUPERVISOR_GRACE_S)
            try:
                reply = self._request(request, deadline_s, self._call_reply_limit, flags=("lost",))
            except _Failed as failed:
                return failed.result
            if reply["ok"]:
                return CallResult(ok=True, output=reply["result"], text=reply["text"])
            result = CallResult(ok=False, error_type=reply["error"]["type"], error=reply["error"]["message"])
            if reply.get("lost"):  # the episode's state could not be rebuilt: the env replays it elsewhere
                self._kill(result)
            return result

    def snapshot(self) -> dict[str, Any]:
        """The episode's state. A tool that broke its own episode process, or its sandbox, yields an
        unreadable-state marker (the turn then fails on state, the tool's fault); a sandbox that is gone for a
        reason of ours (removed from outside, daemon failure) raises ``SandboxError``."""
        with self._lock:
            if self._dead is not None and not self._dead.infrastructure:
                return unreadable_state(f"{self._dead.error_type}: {self._dead.error}")
            self._require_alive("snapshot")
            try:
                reply = self._request({"op": "snapshot"}, self._deadline_s, SNAPSHOT_REPLY_LIMIT)
            except _Failed as failed:
                if failed.result.infrastructure:
                    raise SandboxError(f"could not snapshot the sandbox state: {failed.result.error_type}: "
                                       f"{failed.result.error}") from None
                return unreadable_state(f"{failed.result.error_type}: {failed.result.error}")
        if reply["ok"]:
            return reply["state"]
        return unreadable_state(_error_text(reply))
