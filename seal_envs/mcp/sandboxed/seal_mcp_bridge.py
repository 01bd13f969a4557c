"""The client side of an MCP domain, run where the domain's tools run (the sandbox's episode process).

An MCP domain's ``tools.json`` declares a stdio server instead of Python classes. The spec loader points every
tool of such a domain at a class of this module named after the domain (``seal_mcp_bridge:<domain>.<tool>``),
and puts this module's folder and the domain's folder on the sandbox's python paths. So the sandbox's ordinary
request/reply protocol carries MCP calls: ``reset`` creates the class (which starts a fresh server process and
session: fresh state per episode), ``call`` relays ``tools/call``, ``snapshot`` reads the class's public
attribute ``state``, which holds the server's state resource as last read.

Untrusted servers are bounded here, not trusted to behave: every exchange has a deadline, a line on stdout is
capped at ``max_message_bytes`` and must be JSON-RPC, stderr keeps only its tail, and the server runs in a
session of its own that is killed whole when the server fails or its episode ends (in a container, the
supervisor's reset also kills every process an episode left). A server that crashes, hangs, or breaks protocol
is killed and raises ``MCPServerFault``; a tool result with ``isError`` raises ``MCPToolError``: both are the
tool's failures, which the diagnosis sees.

The official ``mcp`` SDK's ``ClientSession`` speaks the protocol; the stdio transport is ours because the
SDK's buffers a line without bound.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import weakref
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, types
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from pydantic import AnyUrl

SPEC_FILE = "tools.json"
STATE_VARIABLE = "SEAL_MCP_STATE"  # path of a JSON file with the task's initial state, when the task gives one
UNREADABLE_STATE = "__unreadable_state__"  # seal_envs.sandbox.base.UNREADABLE_STATE (no seal_envs import here)
STDERR_TAIL = 2000
DEFAULTS = {"args": [], "env": {}, "startup_timeout_s": 30.0, "call_timeout_s": 5.0,
            "max_message_bytes": 32 << 20, "state_resource": None}


class MCPServerFault(RuntimeError):
    """The server crashed, hung, or broke the protocol; it is stopped for the rest of the episode."""


class MCPToolError(RuntimeError):
    """The server answered a call with ``isError`` (or a JSON-RPC error): the tool's own error message."""


def server_config(domain: str) -> tuple[str, dict[str, Any], dict[str, bool]]:
    """The domain's folder, its ``mcp`` block (with defaults) and ``{tool: mutates_state}``, read from the
    ``tools.json`` of that domain on ``sys.path`` (the loader puts the domain's folder there)."""
    for entry in sys.path:
        file = os.path.join(entry or ".", SPEC_FILE)
        try:
            with open(file) as handle:
                document = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and document.get("domain") == domain and "mcp" in document:
            tools = {tool["name"]: tool.get("mutates_state", True) for tool in document.get("tools", [])}
            return os.path.dirname(os.path.abspath(file)), {**DEFAULTS, **document["mcp"]}, tools
    raise AttributeError(f"no MCP domain {domain!r}: no {SPEC_FILE} with that domain and an 'mcp' block on sys.path")


class _Connection:
    """One server process and its ``ClientSession``, driven by an event loop in a thread of its own."""

    def __init__(self, folder: str, config: dict[str, Any], initial_state_file: str | None):
        self.config, self.folder = config, folder
        self.failure: str | None = None
        self.session: ClientSession | None = None
        self.process: anyio.abc.Process | None = None
        self.stderr = bytearray()
        self._state_file = initial_state_file
        self._portal_context = start_blocking_portal()
        self._portal = self._portal_context.__enter__()
        self._closed = False
        self._owner = os.getpid()  # a forked child inherits this object, not the server or the event loop's thread
        env = {**os.environ, **{str(k): str(v) for k, v in config["env"].items()}}
        if initial_state_file is not None:
            env[STATE_VARIABLE] = initial_state_file
        try:
            self._failed, self._stop, self._stderr_done, ready = self._portal.call(_events, 4)
            self._portal.start_task_soon(self._serve, env, ready)
            self._portal.call(self._handshake, ready)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- the event loop's side

    async def _handshake(self, ready: anyio.Event) -> None:
        timeout = float(self.config["startup_timeout_s"])
        with anyio.move_on_after(timeout):
            await _first_of(ready.wait(), self._failed.wait())
        if not ready.is_set():
            self._fail(f"the MCP server did not start within {timeout:g} s")
            raise MCPServerFault(self.failure)
        await self._guarded(self.session.initialize, timeout, "initialize")

    async def _serve(self, env: dict[str, str], ready: anyio.Event) -> None:
        command = self.config["command"]
        argv = [sys.executable if command == "python" else command, *map(str, self.config["args"])]
        try:
            self.process = await anyio.open_process(argv, cwd=self.folder, env=env, start_new_session=True)
        except OSError as exc:
            self._fail(f"cannot start the MCP server {argv}: {exc}")
            return
        incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](16)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._read_stdout, incoming_writer)
                group.start_soon(self._write_stdin, outgoing_reader)
                group.start_soon(self._read_stderr)
                async with ClientSession(incoming, outgoing) as session:
                    self.session = session
                    ready.set()
                    await _first_of(self._stop.wait(), self._failed.wait())
                group.cancel_scope.cancel()
        except Exception as exc:  # anything the SDK raises ends this server, with the reason kept
            self._fail(f"the MCP client failed: {type(exc).__name__}: {exc}")
        finally:
            self._kill()
            with anyio.move_on_after(2.0, shield=True):
                await self.process.wait()

    async def _read_stdout(self, sink: anyio.abc.ObjectSendStream) -> None:
        """Relay stdout's JSON-RPC lines; the first fault (a bad line, an oversized one, the end) is recorded
        before the session sees its stream close, so callers get the reason, not "connection closed"."""
        limit, buffer = int(self.config["max_message_bytes"]), bytearray()
        async with sink:
            async for chunk in self.process.stdout:
                unsearched = len(buffer)  # what is buffered has no newline: search only the new chunk
                buffer += chunk
                while (end := buffer.find(b"\n", unsearched)) >= 0:
                    unsearched = 0
                    line = bytes(buffer[:end]).strip()
                    del buffer[:end + 1]
                    if len(line) > limit:
                        return self._fail(f"the MCP server wrote a message over {limit} bytes (max_message_bytes)")
                    if line:
                        try:
                            message = types.JSONRPCMessage.model_validate_json(line)
                        except ValueError:
                            return self._fail("the MCP server wrote a line that is not JSON-RPC on stdout (stdout "
                                              f"is the protocol's channel; log to stderr): {line[:200]!r}")
                        await sink.send(SessionMessage(message))
                if len(buffer) > limit:
                    return self._fail(f"the MCP server wrote a message over {limit} bytes (max_message_bytes)")
            with anyio.move_on_after(1.0):
                await self._stderr_done.wait()
                await self.process.wait()
            self._fail(f"the MCP server exited (code {self.process.returncode})")

    async def _write_stdin(self, source: anyio.abc.ObjectReceiveStream) -> None:
        async with source:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n"
                try:
                    await self.process.stdin.send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return self._fail("the MCP server closed its stdin")

    async def _read_stderr(self) -> None:
        async for chunk in self.process.stderr:
            self.stderr = (self.stderr + chunk)[-STDERR_TAIL:]
        self._stderr_done.set()

    async def _guarded(self, operation, timeout: float, what: str, *args: Any) -> Any:
        """``operation(*args)`` within ``timeout``; a server that fails meanwhile or misses it is stopped."""
        outcome: dict[str, Any] = {}

        async def run() -> None:
            try:
                outcome["value"] = await operation(*args)
            except McpError as exc:
                outcome["error"] = MCPToolError(str(exc))
            except Exception as exc:  # the SDK's own errors (a reply it cannot read) are the server's fault
                outcome["fault"] = f"{type(exc).__name__}: {exc}"

        if self.failure is None:
            with anyio.move_on_after(timeout):
                await _first_of(run(), self._failed.wait())
        if self.failure is None and "fault" in outcome:
            self._fail(f"{what}: {outcome['fault']}")
        if self.failure is None and not outcome:
            self._fail(f"{what}: no answer from the MCP server within {timeout:g} s")
        if self.failure is not None:
            raise MCPServerFault(self.failure)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            tail = self.stderr[-500:].decode(errors="replace").strip()
            self.failure = reason + (f"; its stderr ends: {tail}" if tail else "")
            self._failed.set()
            self._kill()

    def _kill(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server and everything it started
        except OSError:
            pass

    # ---------------------------------------------------------------- the caller's side

    def request(self, what: str, operation, *args: Any) -> Any:
        timeout = float(self.config["startup_timeout_s" if what == "list_tools" else "call_timeout_s"])
        return self._portal.call(self._guarded, operation, timeout, what, *args)

    def close(self) -> None:
        """Stop the server (and every process it started, in its session) and the event loop's thread."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner:  # in a forked child: the parent's to stop (waiting on its thread would hang)
            return
        try:
            self._portal.call(self._shutdown)
        except Exception:  # noqa: BLE001 - closing must not fail; the kill below still runs
            pass
        self._kill()
        self._portal_context.__exit__(None, None, None)
        if self._state_file is not None:
            try:
                os.unlink(self._state_file)
            except OSError:
                pass

    async def _shutdown(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
        self._kill()
        if self.process is not None:
            with anyio.move_on_after(2.0, shield=True):
                await self.process.wait()


async def _events(count: int) -> tuple[anyio.Event, ...]:
    return tuple(anyio.Event() for _ in range(count))


async def _first_of(*awaitables) -> None:
    """Wait until the first of ``awaitables`` finishes; cancel the others."""
    async with anyio.create_task_group() as group:
        async def run(awaitable) -> None:
            await awaitable
            group.cancel_scope.cancel()

        for awaitable in awaitables:
            group.start_soon(run, awaitable)


def _call_text(result: types.CallToolResult) -> str:
    """A tool result as the text the policy reads: its text contents, other contents as JSON."""
    parts = [c.text if isinstance(c, types.TextContent) else c.model_dump_json(exclude_none=True)
             for c in result.content]
    if not parts and result.structuredContent is not None:
        parts = [json.dumps(result.structuredContent)]
    return "\n".join(parts)


class MCPDomain:
    """One episode's server. Subclassed per domain (``seal_mcp_bridge.<domain>``), with one method per tool."""

    domain: str = ""

    def __init__(self) -> None:
        self.state: Any = None  # the server's state resource (None when the domain declares none)
        self._folder, self._config, self._mutates = server_config(self.domain)
        self._connection: _Connection | None = None
        self._start(None)

    def _load_scenario(self, state: Any) -> None:
        """A task's initial state: a fresh server started with ``SEAL_MCP_STATE`` naming a JSON file of it."""
        handle, path = tempfile.mkstemp(suffix=".json", prefix="seal-mcp-state-")
        with os.fdopen(handle, "w") as file:
            json.dump(state, file)
        self._start(path)

    def _start(self, initial_state_file: str | None) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = _Connection(self._folder, self._config, initial_state_file)
        weakref.finalize(self, self._connection.close)  # in-process: a replaced episode stops its server
        self._read_state()

    def _read_state(self) -> None:
        uri = self._config["state_resource"]
        if uri is None:
            return
        result = self._connection.request("read_resource", self._connection.session.read_resource, AnyUrl(uri))
        text = "".join(getattr(c, "text", "") for c in result.contents)
        try:
            self.state = json.loads(text)
        except ValueError:
            self.state = {UNREADABLE_STATE: f"the state resource {uri} is not JSON: {text[:200]!r}"}

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        try:
            result = self._connection.request(f"tools/call {tool}", self._connection.session.call_tool, tool,
                                              arguments)
        except MCPServerFault as fault:
            self.state = {UNREADABLE_STATE: str(fault)}  # the server's state is gone with it
            raise
        if self._mutates.get(tool, True):
            self._read_state()
        if result.isError:
            raise MCPToolError(_call_text(result))
        return _call_text(result)

    def _seal_list_tools(self) -> list[dict[str, Any]]:
        """The server's ``tools/list``, as JSON (the host checks it against the meta-schema and the spec)."""
        tools: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self._connection.request("list_tools", self._connection.session.list_tools, cursor)
            tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
            cursor = page.nextCursor
            if not cursor:
                return tools


def _tool_method(tool: str):
    def call(self: MCPDomain, **arguments: Any) -> str:
        return self._call(tool, arguments)

    call.__name__ = call.__qualname__ = tool
    return call


def __getattr__(domain: str) -> type:
    """``seal_mcp_bridge.<domain>``: the domain's class, with a method per tool its spec declares."""
    if domain.startswith("__"):
        raise AttributeError(domain)
    _, _, tools = server_config(domain)
    cls = type(domain, (MCPDomain,), {"domain": domain, **{name: _tool_method(name) for name in tools}})
    globals()[domain] = cls
    return cls
