"""A hostile or broken MCP server never hurts the run (issue 22): each case ends in a clear error or a diagnosed
tool fault within its time limit, leaves no server process behind, and the next episode starts clean.

The server (``fixtures/mcp_hostile/hostile_server.py``) is hand-written JSON-RPC so that it starts in
milliseconds; its ``count`` tool always works, ``misbehave`` does what the mode says.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.parsing import format_tool_call
from seal_envs.resolve import UnresolvedImplementations
from seal_envs.sandbox import SandboxConfig, get_pool
from seal_envs.task import ToolCall

from conftest import FIXTURES

SERVER = FIXTURES / "mcp_hostile" / "hostile_server.py"
STARTUP_S, CALL_S = 5.0, 3.0  # generous for a loaded machine; a hang is caught all the same
BUDGET_S = 30.0  # a case's whole gym.make or call, start-up and the fault included (a loaded 2-core machine)


def make_domain(folder: Path, mode: str) -> Path:
    """A domain folder whose server runs in ``mode``; tools.json declares what a well-behaved server lists."""
    folder.mkdir()
    shutil.copy(SERVER, folder / "hostile_server.py")
    count = {"type": "object", "properties": {"by": {"type": "integer"}}, "required": ["by"]}
    spec = {"domain": "hostile_mcp", "description": "A server that misbehaves.",
            "mcp": {"command": "python", "args": ["hostile_server.py", mode], "state_resource": "seal://state",
                    "startup_timeout_s": STARTUP_S, "call_timeout_s": CALL_S},
            "tools": [{"name": "count", "description": "Add 'by' to the counter.", "parameters": count},
                      {"name": "misbehave", "description": "Misbehaves.",
                       "parameters": {"type": "object", "properties": {}}}]}
    (folder / "tools.json").write_text(json.dumps(spec))
    task = {"id": "t1", "initial_state": {}, "turns": [
        {"user": "Count by one.", "ground_truth": [{"name": "count", "arguments": {"by": 1}}]}]}
    (folder / "tasks.json").write_text(json.dumps({"domain": "hostile_mcp", "tasks": [task]}))
    return folder


def server_processes(folder: Path) -> list[int]:
    """Host processes running this domain's server (the in-process backend's subprocesses)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"hostile_server.py" in cmdline and Path(f"/proc/{pid}/cwd").resolve() == folder.resolve():
            found.append(int(pid))
    return found


def wait_gone(folder: Path, timeout_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (alive := server_processes(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def config(backend: str) -> SandboxConfig:
    return SandboxConfig(backend=backend, call_timeout_s=20.0, pool_size=1)  # over the bridge's own limits


def act(name: str, **arguments) -> str:
    return format_tool_call(ToolCall(name, arguments))


def container_servers(env: ToolUseEnv, docker_daemon) -> int:
    top = docker_daemon.containers.get(env._sandbox.container_id).top(ps_args="-eo pid,args")
    return sum("hostile_server.py" in " ".join(map(str, process)) for process in top.get("Processes") or [])


@pytest.mark.parametrize("mode, reason", [
    ("crash_on_start", "exited (code 3); its stderr ends: hostile: cannot start"),
    ("hang_on_start", f"no answer from the MCP server within {STARTUP_S:g} s"),
    ("no_initialize", f"no answer from the MCP server within {STARTUP_S:g} s"),
    ("garbage_on_start", "not JSON-RPC on stdout"),
    ("flood_on_start", "over 33554432 bytes"),
])
def test_a_server_that_does_not_start_fails_gym_make_with_the_reason(tmp_path, backend, mode, reason):
    folder = make_domain(tmp_path / mode, mode)
    start = time.monotonic()
    with pytest.raises(UnresolvedImplementations) as error:
        ToolUseEnv(domain=folder, sandbox=config(backend))
    assert time.monotonic() - start < BUDGET_S
    assert "tools.json: at $.mcp: the MCP server does not start" in str(error.value)
    assert reason in str(error.value)
    assert wait_gone(folder) == []


@pytest.mark.parametrize("mode, error", [
    ("tool_error", "MCPToolError: the tool refuses"),
    ("crash_on_call", "MCPServerFault: the MCP server exited (code 7); its stderr ends: hostile: crashing on purpose"),
    ("hang_on_call", f"MCPServerFault: tools/call misbehave: no answer from the MCP server within {CALL_S:g} s"),
    ("garbage_on_call", "MCPServerFault: the MCP server wrote a line that is not JSON-RPC on stdout"),
    ("flood_on_call", "MCPServerFault: the MCP server wrote a message over 33554432 bytes"),
])
def test_a_call_that_fails_is_a_diagnosed_tool_error_and_the_next_episode_is_clean(tmp_path, backend, mode, error,
                                                                                    request):
    folder = make_domain(tmp_path / mode, mode)
    env = ToolUseEnv(domain=folder, sandbox=config(backend))
    try:
        env.reset(options={"task_id": "t1"})
        start = time.monotonic()
        observation, *_ = env.step(act("misbehave"))
        assert time.monotonic() - start < BUDGET_S
        assert error in observation[0]["content"]
        observation, *_ = env.step(act("count", by=1))  # a server that died stays down: the call fails too
        if mode == "tool_error":
            assert "counter=1" in observation[0]["content"]
        _, reward, terminated, _, info = env.step("Done.")
        assert terminated and not info["infrastructure_error"]  # the tool's fault, diagnosed, not masked
        assert info["label"] == ("pass" if mode == "tool_error" else "recovery_failure")
        if backend == "docker":
            assert container_servers(env, request.getfixturevalue("docker_daemon")) <= 1
        env.reset(options={"task_id": "t1"})  # the next episode: a fresh server, fresh state
        observation, *_ = env.step(act("count", by=1))
        assert "counter=1" in observation[0]["content"]
        _, reward, *_ = env.step("Counted.")
        assert reward == 1.0
        if backend == "docker":
            assert container_servers(env, request.getfixturevalue("docker_daemon")) == 1
    finally:
        env.close()
        get_pool(config(backend)).close()
    assert wait_gone(folder) == []


def test_a_lying_schema_names_the_tool_and_the_field(tmp_path, backend):
    folder = make_domain(tmp_path / "lying", "lying_schema")
    with pytest.raises(UnresolvedImplementations) as error:
        ToolUseEnv(domain=folder, sandbox=config(backend))
    assert ("tools.json: at $.tools[0].parameters.properties.by.type: tool 'count': the MCP server's inputSchema "
            "has 'string', tools.json 'integer'") in str(error.value)


def test_a_listed_tool_that_breaks_the_meta_schema_names_the_tool_and_the_field(tmp_path, backend):
    folder = make_domain(tmp_path / "invalid", "invalid_schema")
    with pytest.raises(UnresolvedImplementations) as error:
        ToolUseEnv(domain=folder, sandbox=config(backend))
    assert ("tools.json: at $.mcp: the MCP server's tools/list[2] ('broken'): parameters.required: names ['ghost'] "
            "that are not in 'properties'") in str(error.value)
