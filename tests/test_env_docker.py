"""The env on the real Docker backend survives hung and crashing tools and dead containers."""

from __future__ import annotations

import json

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.parsing import format_tool_call
from seal_envs.sandbox import SandboxConfig
from seal_envs.task import ToolCall

from conftest import FIXTURES

pytestmark = pytest.mark.docker
EVIL = FIXTURES / "evil"
CONFIG = SandboxConfig(call_timeout_s=1.5, pool_size=1)


def act(name, **arguments):
    return format_tool_call(ToolCall(name, arguments))


@pytest.fixture
def env(docker_daemon):
    env = ToolUseEnv(domain=EVIL, sandbox=CONFIG)
    env.reset(options={"task_id": "count"})
    yield env
    env.close()


@pytest.mark.parametrize("tool, error", [("hang", "Timeout"), ("crash", "SandboxCrashed")])
def test_tool_that_kills_its_sandbox_is_a_diagnosed_turn_and_the_episode_goes_on(env, tool, error):
    env.step(act("add", amount=2))
    obs, _, terminated, _, info = env.step(act(tool))
    assert not terminated and not info["infrastructure_error"]
    assert json.loads(obs[0]["content"])["error"].startswith(error)
    *_, info = env.step("Added.")
    assert info["label"] == "pass"  # the state (counter 3) was rebuilt in a fresh sandbox
    env.step(act("add", amount=3))
    _, reward, terminated, _, info = env.step("Added.")
    assert terminated and reward == 1.0


def test_container_killed_from_outside_is_an_infrastructure_error(env, docker_daemon):
    env.step(act("add", amount=2))
    docker_daemon.containers.get(env._sandbox.container_id).remove(force=True)
    obs, reward, terminated, _, info = env.step(act("add", amount=1))
    assert terminated and reward == 0.0 and info["infrastructure_error"] and info["label"] == "infrastructure_error"
    env.reset(options={"task_id": "count"})  # the next episode gets a working sandbox
    assert json.loads(env.step(act("add", amount=2))[0][0]["content"]) == {"counter": 3}
