"""The tool server that runs inside a sandbox: a supervisor that never runs tool code, and one fresh
process per episode that does.

Standard library only, because it runs inside the container image (``python3 server.py``). The in-process
backend drives the same ``ToolServer`` class directly, so both backends execute tools by the same code.

Processes in the container, and why:
- the supervisor speaks to the host over a unix socket (``--connect``) in a folder only the host's user and
  root can open (stdin/stdout outside a container). In a container it runs as root with only the
  capabilities it needs (``--tool-user``): tool code, which runs as the unprivileged tool user, can neither
  signal it, ptrace it, open its fds through ``/proc`` nor reach the socket's folder;
- one zygote per domain code (python paths + code hash) drops to the tool user and imports the domain's
  modules once, so domains never share module names and a fresh episode costs a ``fork``, not an import;
- one worker per episode, forked from the zygote: it runs the tools, in its own session, with stdout and
  stderr captured to a file in its own temp dir. ``reset`` kills every process of the tool user but the
  zygotes, replaces a zygote a tool stopped, empties ``/tmp`` and removes every SysV and POSIX IPC object, so
  no global, class attribute, file, IPC object or background process survives an episode.
Every worker reply is checked against the schema of its request's op before it reaches the host; anything
else is the tool's failure (``ProtocolError``).
A call that hangs, crashes or kills its worker is the tool's failure: the supervisor kills the worker,
replays the episode's successful calls into a fresh one and answers with the error.

Requests and replies, one JSON object per line, replies echo the request's ``id``:
  {"op": "reset", "classes": {"pkg.mod:Class": state|null}, "python_paths": [...], "code": "hash"}
  {"op": "call", "target": "pkg.mod:Class.method", "arguments": {...}, "timeout_s": 2.5}
                                                                        -> {"ok": true, "result": ..., "text": "..."}
  {"op": "snapshot"}                                                      -> {"ok": true, "state": {...}}
  {"op": "resolve", "targets": ["pkg.mod:Class.method", ...], "python_paths": [...], "code": "hash"}
                                                         -> {"ok": true, "problems": {target: "what is missing"}}
  {"op": "ping"}                                                          -> {"ok": true}
Failures reply {"ok": false, "error": {"type": "ExceptionName", "message": "..."}}; a failed call after
which the episode's state could not be rebuilt also carries ``"lost": true``, a reset that could not start
an episode process ``"sandbox": true``. A call's optional ``timeout_s`` (what is left of the step's budget)
bounds the call and its rebuild together, below ``call_timeout_s``.

A call's ``result`` is the JSON view of what the tool returned; ``text`` is the return value as Python words it
(``result_text``), taken at call time: a benchmark that compares tool outputs as text (BFCL) compares that.
"""

from __future__ import annotations

import ctypes
import difflib
import importlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import time
from typing import Any

MAX_DEPTH = 32
SCRATCH = os.environ.get("SEAL_SANDBOX_SCRATCH", "/tmp")  # episode temp dirs (tests point it elsewhere)
SNAPSHOT_LIMIT = 64 << 20
CALL_REPLY_LIMIT_FACTOR = 24  # a call reply holds result and text, each up to max_output_bytes; JSON escaping grows them
PR_SET_DUMPABLE = 4
REAP_WAIT_S = 1.0
ZYGOTE_ANSWER_S = 2.0  # a zygote forks a worker in milliseconds; longer means a tool stopped it
MQUEUE_DIR = "/dev/mqueue"
SYSV_IPC = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))  # /proc/sysvipc file, libc remover
IPC_RMID = 0
SANDBOX_INITS = ("docker-init", "tini", "tini-static")  # what a sandbox container runs as pid 1
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def state_key(key: Any) -> str:
    """A dict key as a JSON key that keeps Python's ``==`` between keys: ``{0.0: x} == {0: x} == {False: x}``.

    Strings stay as they are; numbers become ``#`` and their value (integral values as ints); other keys ``#`` and
    their repr.
    """
    if isinstance(key, str):
        return key
    if isinstance(key, (bool, int, float)) and float(key).is_integer():
        return f"#{int(key)}"
    return f"#{key!r}"


def result_text(value: Any) -> str:
    """A return value in words: a string as it is, a dict as JSON when it serialises, anything else ``str()``."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:  # a value JSON cannot write (e.g. an mpmath number): Python's own words
            return str(value)
    return str(value)


def to_jsonable(value: Any, depth: int = 0) -> Any:
    """A deterministic JSON view of a tool's state or result (objects become their public fields)."""
    if depth > MAX_DEPTH:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {state_key(k): to_jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_jsonable(v, depth + 1) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if hasattr(value, "__dict__"):
        fields = {k: to_jsonable(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
        return {"__class__": type(value).__name__, **fields}
    return repr(value)


def public_state(instance: Any) -> dict[str, Any]:
    """The verifier's view of an instance: its public attributes (BFCL's checker uses the same rule)."""
    return {k: to_jsonable(v) for k, v in vars(instance).items() if not k.startswith("_")}


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def error_reply(error_type: str, message: str, limit: int, **extra: Any) -> dict[str, Any]:
    """A failure reply whose message is capped at ``limit`` characters (tools may raise huge messages)."""
    if len(message) > limit:
        message = message[:limit] + f" [truncated at {limit} of {len(message)} characters]"
    return {"ok": False, "error": {"type": error_type, "message": message}, **extra}


REPLY_FIELDS: dict[str, dict[str, type | None]] = {  # per op, what a successful reply holds (None: any JSON)
    "call": {"result": None, "text": str}, "snapshot": {"state": dict}, "resolve": {"problems": dict},
    "reset": {}, "ping": {},
}
ERROR_TYPE_LIMIT = 200


def checked_reply(op: str, reply: Any, limit: int, flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """``reply`` rebuilt from exactly what the schema of ``op`` allows (and the boolean ``flags``); ValueError
    when it does not fit. Replies come from processes that tool code can subvert: nothing else crosses."""
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise ValueError("a reply must be a JSON object with a boolean 'ok'")
    extra = set(reply) - {"ok", "error", *flags, *REPLY_FIELDS.get(op, {})}
    if extra:
        raise ValueError(f"a {op!r} reply has unknown keys {sorted(extra)[:5]}")
    clean = {flag: True for flag in flags if reply.get(flag) is True}
    if not reply["ok"]:
        error = reply.get("error")
        if not (isinstance(error, dict) and set(error) == {"type", "message"}
                and isinstance(error["type"], str) and isinstance(error["message"], str)
                and 0 < len(error["type"]) <= ERROR_TYPE_LIMIT):
            raise ValueError("a failure reply needs exactly error.type and error.message, both strings")
        return {**error_reply(error["type"], error["message"], limit), **clean}
    fields = REPLY_FIELDS.get(op)
    if fields is None or "error" in reply:
        raise ValueError(f"no successful reply to op {op!r} carries an error" if fields is not None
                         else f"unknown op {op!r}")
    for name, kind in fields.items():
        if name not in reply or (kind is not None and not isinstance(reply[name], kind)):
            raise ValueError(f"a {op!r} reply needs {name!r}" + (f" of type {kind.__name__}" if kind else ""))
    if op == "resolve" and not all(isinstance(v, str) for v in reply["problems"].values()):
        raise ValueError("resolve problems must be strings")
    return {"ok": True, **{name: reply[name] for name in fields}, **clean}


class ToolServer:
    """Executes calls against one episode's tool instances."""

    def __init__(self, max_output_bytes: int = 1 << 16):
        self.max_output_bytes = max_output_bytes
        self.instances: dict[str, Any] = {}

    @staticmethod
    def _add_paths(python_paths: list[str] | None) -> None:
        for path in python_paths or []:
            if path not in sys.path:
                sys.path.insert(0, path)

    def reset(self, classes: dict[str, Any], python_paths: list[str] | None = None) -> None:
        self._add_paths(python_paths)
        instances = {}
        for class_path, state in classes.items():
            module_name, class_name = class_path.split(":")
            instance = getattr(importlib.import_module(module_name), class_name)()
            if state is not None:
                loader = getattr(instance, "_load_scenario", None)
                if loader is None:
                    raise TypeError(f"{class_path} has no _load_scenario(state) method to load its initial state")
                loader(json.loads(json.dumps(state)))  # a private copy: tools may mutate it
            instances[class_path] = instance
        self.instances = instances

    def resolve(self, targets: list[str], python_paths: list[str] | None = None) -> dict[str, str]:
        """What is missing of each ``module:Class`` or ``module:Class.method`` target (absent: it resolves).
        Imports the modules, creates no instance and runs no method: a domain is checked before any episode."""
        self._add_paths(python_paths)
        problems = {}
        for target in targets:
            module_name, _, attribute = target.partition(":")
            class_name, _, method = attribute.partition(".")
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # any import failure is the domain's: report it, check the other targets
                problems[target] = f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
                continue
            cls = getattr(module, class_name, None)
            if not isinstance(cls, type):
                problems[target] = f"module {module_name!r} has no class {class_name!r}" + _did_you_mean(
                    class_name, [n for n, v in vars(module).items() if isinstance(v, type)])
            elif method and not callable(getattr(cls, method, None)):
                problems[target] = f"class {class_name!r} has no method {method!r}" + _did_you_mean(
                    method, [n for n in dir(cls) if not n.startswith("_")])
        return problems

    def call(self, target: str, arguments: dict[str, Any]) -> tuple[Any, str]:
        """The call's result (JSON view) and its ``result_text``."""
        class_path, method = target.rsplit(".", 1)
        if class_path not in self.instances:
            raise LookupError(f"{class_path} is not loaded in this episode")
        value = getattr(self.instances[class_path], method)(**arguments)
        result, text = to_jsonable(value), result_text(value)
        encoded = json.dumps(result)
        if max(len(encoded), len(text)) > self.max_output_bytes:
            result = {"truncated_output": encoded[: self.max_output_bytes],
                      "note": f"output truncated at {self.max_output_bytes} of {len(encoded)} bytes"}
            return result, json.dumps(result)
        return result, text

    def snapshot(self) -> dict[str, Any]:
        return {path: public_state(instance) for path, instance in self.instances.items()}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request; exceptions of the tool become error replies, never escape."""
        try:
            op = request.get("op")
            if op == "call":
                result, text = self.call(request["target"], request.get("arguments") or {})
                return {"ok": True, "result": result, "text": text}
            if op == "snapshot":
                return {"ok": True, "state": self.snapshot()}
            if op == "reset":
                self.reset(request["classes"], request.get("python_paths"))
                return {"ok": True}
            if op == "resolve":
                return {"ok": True, "problems": self.resolve(list(request["targets"]), request.get("python_paths"))}
            if op == "ping":
                return {"ok": True}
            return error_reply("ProtocolError", f"unknown op {op!r}", self.max_output_bytes)
        except Exception as exc:  # the tool's own failure is data for the diagnosis
            return error_reply(type(exc).__name__, str(exc), self.max_output_bytes)


# ------------------------------------------------------------------------------------------ line channels


class Channel:
    """Newline-delimited JSON over one socket or pipe pair, with deadlines and a size cap per line."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.buffer = bytearray()

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        while data:
            data = data[os.write(self.write_fd, data):]

    def receive(self, deadline: float | None, limit: int, also: tuple[int, ...] = ()) -> Any:
        """The next line's JSON value. Raises TimeoutError, EOFError (closed, or an fd in ``also`` became
        readable: the worker died), ValueError (not JSON or longer than ``limit``)."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > limit:
                raise ValueError(f"reply longer than {limit} bytes")
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.read_fd, *also], [], [], timeout)
            if not ready:
                raise TimeoutError
            if self.read_fd not in ready:
                raise EOFError
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        if len(line) > limit:
            raise ValueError(f"reply longer than {limit} bytes")
        return json.loads(line)


def episode_dir(pid: int) -> str:
    return os.path.join(SCRATCH, f"episode-{pid}")


def _set_dumpable(flag: int) -> None:
    """Non-dumpable: /proc/PID/fd and ptrace are closed to other processes of the same uid."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, flag, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor is then only as safe as the uid separation


def _close_fds_except(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


# ------------------------------------------------------------------------------------------ worker side


def _worker_main(sock: socket.socket, python_paths: list[str], max_output_bytes: int) -> None:
    """One episode's process: own session, own temp dir, stdout/stderr captured, tools served on ``sock``."""
    os.setsid()
    _set_dumpable(1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    scratch = episode_dir(os.getpid())
    os.makedirs(scratch, exist_ok=True)
    os.chdir(scratch)
    os.environ["TMPDIR"] = scratch
    capture = os.open(os.path.join(scratch, ".output"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(capture, 1)
    os.dup2(capture, 2)
    _close_fds_except({sock.fileno()})
    sys.stdout = sys.stderr = open(1, "w", closefd=False)
    channel = Channel(sock.fileno(), sock.fileno())
    server = ToolServer(max_output_bytes)
    server.reset({}, python_paths)
    while True:
        try:
            request = channel.receive(None, SNAPSHOT_LIMIT)
        except (EOFError, ValueError, OSError):
            os._exit(0)
        reply = server.handle(request)
        try:
            channel.send({**reply, "seq": request.get("seq")})
        except (TypeError, ValueError) as exc:  # a result json cannot encode (e.g. a NaN key collision)
            channel.send({**error_reply(type(exc).__name__, str(exc), max_output_bytes), "seq": request.get("seq")})


def _zygote_main(control: socket.socket, python_paths: list[str], modules: list[str], max_output_bytes: int,
                 tool_uid: int | None) -> None:
    """Become the tool user, import a domain's modules once, then fork one worker per ``spawn`` request,
    passing back its socket."""
    _close_fds_except({control.fileno()})
    if tool_uid is not None:
        _become(tool_uid)
    for path in python_paths:
        sys.path.insert(0, path)
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:
            pass  # the worker imports it again and reports the error as the task's
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped automatically
    while True:
        if not control.recv(1):
            os._exit(0)
        ours, theirs = socket.socketpair()
        try:
            pid = os.fork()
        except OSError:  # the pids limit: answer with no socket, the supervisor reports it
            control.sendall(bytes(8))
            ours.close()
            theirs.close()
            continue
        if pid == 0:
            control.close()
            ours.close()
            _worker_main(theirs, python_paths, max_output_bytes)
        theirs.close()
        socket.send_fds(control, [pid.to_bytes(8, "little")], [ours.fileno()])
        ours.close()


# ------------------------------------------------------------------------------------------ supervisor


class Worker:
    """The supervisor's handle on one episode's process."""

    def __init__(self, pid: int, sock: socket.socket):
        self.pid, self.sock = pid, sock
        self.channel = Channel(sock.fileno(), sock.fileno())
        try:
            self.exited_fd: tuple[int, ...] = (os.pidfd_open(pid),)
        except (AttributeError, OSError):
            self.exited_fd = ()
        self.seq = 0

    def request(self, message: dict[str, Any], deadline: float, limit: int) -> dict[str, Any]:
        """The worker's reply, checked against the op's schema (ValueError: out of protocol)."""
        self.seq += 1
        self.channel.send({**message, "seq": self.seq})
        reply = self.channel.receive(deadline, limit, self.exited_fd)
        if not isinstance(reply, dict) or reply.pop("seq", None) != self.seq:
            raise ValueError("the episode process answered out of protocol")
        return checked_reply(str(message.get("op")), reply, limit)

    def close(self) -> None:
        for fd in self.exited_fd:
            os.close(fd)
        self.sock.close()


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start an episode process: the host should use another sandbox, not blame the task."""


class Supervisor:
    """Owns the host channel; runs no tool code. One episode at a time."""

    def __init__(self, call_timeout_s: float, max_output_bytes: int, sweep: bool, tool_uid: int | None = None):
        self.call_timeout_s, self.max_output_bytes, self.sweep = call_timeout_s, max_output_bytes, sweep
        self.tool_uid = tool_uid  # the uid zygotes drop to (None: stay as we are, outside a container)
        self.zygotes: dict[tuple[str, ...], tuple[int, socket.socket]] = {}
        self.worker: Worker | None = None
        self.episode: dict[str, Any] | None = None  # the reset request of the running episode
        self.replay: list[dict[str, Any]] = []  # its successful calls, to rebuild a worker a tool killed

    def _zygote(self, key: tuple[str, ...], python_paths: list[str], modules: list[str]) -> socket.socket:
        known = self.zygotes.get(key)
        if known is not None:
            if _runnable(known[0]):
                return known[1]
            self._drop_zygote(key)  # a tool killed or stopped it: start another
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            _zygote_main(theirs, python_paths, modules, self.max_output_bytes, self.tool_uid)
        theirs.close()
        self.zygotes[key] = (pid, ours)
        return ours

    def _drop_zygote(self, key: tuple[str, ...]) -> None:
        pid, control = self.zygotes.pop(key)
        _kill(pid)
        control.close()

    def _spawn(self, reset: dict[str, Any], deadline: float) -> Worker:
        """A fresh worker from the domain's zygote; a zygote that does not answer (a tool stopped it) is
        replaced once, so it costs the episode milliseconds, never its deadline."""
        python_paths = list(reset.get("python_paths") or [])
        key = (str(reset.get("code", "")), *python_paths)
        modules = sorted({path.split(":")[0] for path in [*reset.get("classes", {}), *reset.get("targets", ())]})
        for attempt in range(2):
            fresh = key not in self.zygotes or not _runnable(self.zygotes[key][0])
            control = self._zygote(key, python_paths, modules)
            left = max(0.001, deadline - time.monotonic())  # a fresh zygote imports the domain first: its time
            control.settimeout(left if fresh else min(ZYGOTE_ANSWER_S, left))
            try:
                control.sendall(b"s")
                message, fds, _, _ = socket.recv_fds(control, 8, 1)
            except TimeoutError:
                if fresh:  # the domain's import is slow: the domain's fault, reported as such
                    self._drop_zygote(key)
                    raise
                message, fds = b"", []
            except OSError:
                message, fds = b"", []
            if fds:
                return Worker(int.from_bytes(message, "little"), socket.socket(fileno=fds[0]))
            if message:  # the zygote answered without a socket: the pids limit
                break
            self._drop_zygote(key)
        raise SandboxUnavailable("could not fork an episode process (its zygote died or the pids limit is reached)")

    def _end_episode(self) -> None:
        """Kill the episode's process group and remove its temp dir. With ``sweep`` (only in a container of
        its own, as the sandbox user) also kill every other process and empty the whole scratch dir, which
        catches children that left the worker's session and files written outside its temp dir."""
        if self.worker is not None:
            _kill(-self.worker.pid)
            shutil.rmtree(episode_dir(self.worker.pid), ignore_errors=True)
            self.worker.close()
            self.worker = None
        if not self.sweep:
            return
        keep = {os.getpid(), 1, *(pid for pid, _ in self.zygotes.values())}
        killed = [pid for pid in _pids() if pid not in keep and _uid(pid) == self.tool_uid]
        for pid in killed:
            _kill(pid)
        deadline = time.monotonic() + REAP_WAIT_S  # their pids count against the limit until init reaps them
        while any(os.path.exists(f"/proc/{pid}") for pid in killed) and time.monotonic() < deadline:
            time.sleep(0.001)
        for key in [k for k, (pid, _) in self.zygotes.items() if not _runnable(pid)]:
            self._drop_zygote(key)  # stopped or killed by a tool: the next spawn starts a fresh one
        self._as_tool_user(_clean_scratch_and_ipc, deadline + REAP_WAIT_S)

    def _as_tool_user(self, job: Any, deadline: float) -> None:
        """Run ``job`` in a child as the tool user (the owner of what tools leave behind: files in a sticky
        ``/tmp``, IPC objects, which only their owner may remove without CAP_SYS_ADMIN)."""
        if self.tool_uid is None:
            job()
            return
        pid = os.fork()
        if pid == 0:
            try:
                _close_fds_except(set())
                _become(self.tool_uid)
                job()
            finally:
                os._exit(0)
        try:
            exited = os.pidfd_open(pid)
        except OSError:  # already exited and reaped
            return
        try:
            if not select.select([exited], [], [], max(0.0, deadline - time.monotonic()))[0]:
                _kill(pid)
        finally:
            os.close(exited)

    def _start(self, reset: dict[str, Any], deadline: float) -> dict[str, Any]:
        self._end_episode()
        try:
            self.worker = self._spawn(reset, deadline)
        except TimeoutError:  # the domain's import outlasted the deadline
            raise
        except OSError as exc:  # fork failed (pids limit) or the zygote's socket broke
            raise SandboxUnavailable(f"could not start an episode process: {exc}") from exc
        return self.worker.request(reset, deadline, SNAPSHOT_LIMIT)

    def _rebuild(self, deadline: float) -> bool:
        """A fresh worker with the episode's state: its reset plus every successful call, replayed, all
        by ``deadline`` (so the host's deadline bounds a call plus its rebuild)."""
        try:
            if not self._start(self.episode, deadline)["ok"]:
                return False
            return all(self.worker.request(call, deadline, SNAPSHOT_LIMIT)["ok"] for call in self.replay)
        except (TimeoutError, EOFError, ValueError, OSError, RuntimeError):
            return False

    @staticmethod
    def _oom_kills() -> int:
        """The container's OOM-kill count (cgroup v2 or v1), to tell a memory kill from any other death."""
        for events in OOM_COUNTERS:
            try:
                with open(events) as lines:
                    return next(int(line.split()[1]) for line in lines if line.startswith("oom_kill "))
            except (OSError, StopIteration, ValueError):
                continue
        return 0

    def _worker_request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Forward to the episode's worker; a worker that hangs, dies or breaks protocol is the tool's failure.
        A call and its rebuild share ``min(call_timeout_s, timeout_s)``: half for the call, half to rebuild."""
        if self.worker is None:
            return error_reply("NoEpisode", "reset first", self.max_output_bytes)
        limit = SNAPSHOT_LIMIT if request["op"] == "snapshot" else CALL_REPLY_LIMIT_FACTOR * self.max_output_bytes + (64 << 10)
        budget = request.pop("timeout_s", None)
        call_s = self.call_timeout_s
        if isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget < 2 * call_s:
            call_s = max(0.0, budget / 2)
        ooms = self._oom_kills()
        try:
            reply = self.worker.request(request, time.monotonic() + call_s, limit)
        except TimeoutError:
            failure = ("Timeout", f"the call did not finish within {call_s:g} s")
        except (EOFError, OSError):
            failure = (("OutOfMemory", "the tool exceeded the sandbox memory limit") if self._oom_kills() > ooms
                       else ("SandboxCrashed", "the tool's process exited" + self._output_tail()))
        except ValueError as exc:
            failure = ("OutputTooLarge", str(exc)) if "longer than" in str(exc) else (
                "ProtocolError", f"the tool corrupted its episode process's replies ({exc})")
        else:
            if request["op"] == "call" and reply["ok"]:
                self.replay.append(request)
            return reply
        lost = request["op"] == "snapshot" or not self._rebuild(time.monotonic() + call_s)
        return error_reply(*failure, self.max_output_bytes, **({"lost": True} if lost else {}))

    def _output_tail(self) -> str:
        try:
            with open(os.path.join(episode_dir(self.worker.pid), ".output"), "rb") as output:
                return ": " + output.read()[-500:].decode(errors="replace")
        except (OSError, AttributeError):
            return ""

    def handle(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            return error_reply("ProtocolError", "a request must be a JSON object", self.max_output_bytes)
        op = request.get("op")
        if op == "ping":
            return {"ok": True}
        if op in ("reset", "resolve"):  # resolving imports domain code: a fresh worker does it, no episode follows
            self.episode, self.replay = (request if op == "reset" else None), []
            what = "loading the task state" if op == "reset" else "importing the domain's code"
            try:
                reply = self._start(request, time.monotonic() + self.call_timeout_s)
                if op == "resolve":
                    self._end_episode()
                return reply
            except TimeoutError:
                return error_reply("Timeout", f"{what} took over {self.call_timeout_s:g} s",
                                   self.max_output_bytes)
            except SandboxUnavailable as exc:
                return error_reply("SandboxUnavailable", str(exc), self.max_output_bytes, sandbox=True)
            except (EOFError, ValueError, OSError) as exc:
                return error_reply("TaskLoadCrashed", f"the episode process died while {what} "
                                   f"({exc or type(exc).__name__})", self.max_output_bytes)
        if op in ("call", "snapshot"):
            return self._worker_request(request)
        return error_reply("ProtocolError", f"unknown op {op!r}", self.max_output_bytes)


def _runnable(pid: int) -> bool:
    """Alive and neither stopped, traced nor a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)  # no /proc (not Linux)
            return True
        except OSError:
            return False


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _uid(pid: int) -> int | None:
    """The real uid of a process (None: it is gone or /proc does not say)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError):
        return None


def _become(uid: int) -> None:
    """Drop every privilege for ``uid`` (root's capabilities go with the uid change); non-dumpable, so
    processes of that uid still cannot ptrace us or open our fds."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    _set_dumpable(0)


def _clean_scratch_and_ipc() -> None:
    """Empty the scratch dir and remove every SysV shared memory segment, message queue and semaphore set and
    every POSIX message queue this user can see (the container has its own IPC namespace)."""
    for entry in os.listdir(SCRATCH):
        path = os.path.join(SCRATCH, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            _unlink(path)
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, remover in SYSV_IPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                ids = [int(line.split()[1]) for line in list(table)[1:] if line.strip()]
        except (OSError, ValueError, IndexError):
            continue
        for ipc_id in ids:
            if kind == "sem":
                getattr(libc, remover)(ipc_id, 0, IPC_RMID)
            else:
                getattr(libc, remover)(ipc_id, IPC_RMID, None)
    if os.path.isdir(MQUEUE_DIR):
        for entry in os.listdir(MQUEUE_DIR):
            _unlink(os.path.join(MQUEUE_DIR, entry))


def _kill(pid: int) -> None:
    """SIGKILL a process (a negative pid: a process group), if it still exists."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _in_sandbox_container() -> bool:
    """Whether pid 1 is a container's init (the sweep kills every process of the tool user: never on a host)."""
    try:
        with open("/proc/1/cmdline", "rb") as cmdline:
            return os.path.basename(cmdline.read().split(b"\0")[0].decode(errors="replace")) in SANDBOX_INITS
    except OSError:
        return False


def _host_channel(connect: str | None) -> Channel:
    """The channel to the host: a connection to the unix socket the host listens on, or stdin/stdout. Either
    way fds 0-2 become /dev/null, so nothing forked from here inherits the channel."""
    if connect is not None:
        link = socket.socket(socket.AF_UNIX)
        link.connect(connect)
        fd = link.detach()
        host = Channel(fd, fd)
    else:
        host = Channel(os.dup(0), os.dup(1))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.set_inheritable(host.read_fd, False)
    os.set_inheritable(host.write_fd, False)
    return host


def serve(call_timeout_s: float, max_output_bytes: int, sweep: bool = False, connect: str | None = None,
          tool_uid: int | None = None) -> None:
    """Serve the host until its channel closes (the owner is gone): then every process of the sandbox ends.

    ``tool_uid``: zygotes and workers run as this uid (we must be root to drop to it). ``sweep``: at each reset
    kill every process of ``tool_uid`` but the zygotes, and empty ``/tmp`` and the IPC namespace. Only for a
    sandbox container's main process; refused elsewhere, where it would wreck a host."""
    if sweep and (tool_uid in (None, 0) or not _in_sandbox_container()):
        raise SystemExit("server.py: refusing --sweep: it kills every process of the tool user and empties /tmp; "
                         "it is meant for a sandbox container's main process, with --tool-user naming an "
                         "unprivileged uid")
    host = _host_channel(connect)
    _set_dumpable(0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    supervisor = Supervisor(call_timeout_s, max_output_bytes, sweep, tool_uid)
    while True:
        try:
            request = host.receive(None, SNAPSHOT_LIMIT)
        except (EOFError, OSError):
            break
        except ValueError as exc:
            if "longer than" in str(exc):  # the host broke the protocol: its reply would be lost in the rest
                break
            request = None
        reply = supervisor.handle(request)
        try:
            host.send({**reply, "id": request.get("id") if isinstance(request, dict) else None})
        except OSError:
            break
    supervisor._end_episode()


def _main(argv: list[str]) -> None:
    flags = [a for a in argv[2:] if a != "--sweep"]
    options = dict(zip(flags[::2], flags[1::2]))
    tool_user = options.get("--tool-user")
    serve(float(argv[0]), int(argv[1]), sweep="--sweep" in argv[2:], connect=options.get("--connect"),
          tool_uid=int(tool_user) if tool_user is not None else None)


if __name__ == "__main__":
    _main(sys.argv[1:])
