"""MCP domains (issue 22): a tools.json that declares an MCP server instead of Python classes works everywhere a
domain does, with the server started fresh in the sandbox for each episode. The bundled ``mcp_notes`` domain's
server uses the official ``mcp`` SDK (FastMCP)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from seal_envs.parsing import format_tool_call
from seal_envs.spec import SpecError, load_domain
from seal_envs.task import ToolCall
from seal_envs.validation import ValidationConfig, validate_domain


def act(name: str, **arguments) -> str:
    return format_tool_call(ToolCall(name, arguments))


def test_the_loader_points_mcp_tools_at_the_bridge_and_refuses_mixed_specs(tmp_path):
    domain = load_domain("mcp_notes")
    assert domain.mcp["command"] == "python" and domain.tool("add_note").implementation == (
        "seal_mcp_bridge:mcp_notes.add_note")
    assert not domain.tool("read_note").mutates_state  # the server's readOnlyHint, written by seal-envs mcp-tools
    spec = json.loads((domain.root / "tools.json").read_text())
    spec["tools"][0]["implementation"] = "notes:Notes.add"
    (tmp_path / "tools.json").write_text(json.dumps(spec))
    with pytest.raises(SpecError, match=r"at \$.tools\[0\].implementation: an MCP domain's tools are implemented"):
        load_domain(tmp_path)
    del spec["mcp"]  # a Python domain then: tools[1] names no implementation
    (tmp_path / "tools.json").write_text(json.dumps(spec))
    with pytest.raises(SpecError, match=r"at \$.tools\[1\]: 'implementation' is a required property"):
        load_domain(tmp_path)


def test_the_example_domain_validates(backend):
    report = validate_domain("mcp_notes", ValidationConfig(sandbox=backend))
    assert report.ok, [str(p) for p in report.problems]
    assert (report.tasks, report.calls) == (3, 5)


def test_episodes_get_a_fresh_server_with_the_tasks_state_and_tool_errors_are_diagnosed(backend):
    env = gym.make("seal/ToolUse-v0", domain="mcp_notes", sandbox=backend, mode="eval").unwrapped
    try:
        env.reset(options={"task_id": "notes_002"})
        observation, *_ = env.step(act("delete_note", title="nothing"))
        assert "MCPToolError: Error executing tool delete_note: no note titled 'nothing'" in observation[0]["content"]
        observation, *_ = env.step(act("delete_note", title="old"))
        assert observation[0]["content"] == "deleted 'old'"
        _, reward, terminated, _, info = env.step("Deleted.")
        assert terminated and reward == 1.0 and info["label"] == "pass"
        env.reset(options={"task_id": "notes_002"})  # the deleted note is back: a fresh server, the task's state
        observation, *_ = env.step(act("read_note", title="old"))
        assert observation[0]["content"] == "x"
        _, reward, _, _, info = env.step("It says x.")
        assert reward == 0.0 and info["label"] == "state_mismatch"
    finally:
        env.close()
