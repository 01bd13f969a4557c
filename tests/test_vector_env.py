"""Vector envs through Gymnasium's own entry points: async and sync, info, autoreset, mutate through wrappers."""

from __future__ import annotations

import copy
import multiprocessing as mp

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
from gymnasium.wrappers.vector import DictInfoToList

import seal_envs  # noqa: F401  (registers the ids)
from seal_envs.spaces import ChatMessages

ANSWER = "I can't help with that."  # a scripted policy: every step answers, so every step ends a user turn


@pytest.fixture(params=["async", "sync"])
def envs(request):
    envs = gym.make_vec("seal/Shop-v0", num_envs=2, vectorization_mode=request.param, sandbox="inprocess")
    yield envs
    envs.close()


def test_steps_and_info_follow_gymnasium(envs):
    obs, info = envs.reset(seed=0)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert isinstance(obs, tuple) and len(obs) == 2 and obs[0][-1]["role"] == "user"
    assert info["tools"].dtype == object and info["_tools"].all()
    assert all(isinstance(tools, list) and tools[0]["type"] == "function" for tools in info["tools"])
    obs, reward, terminated, truncated, info = envs.step((ANSWER, ANSWER))
    assert reward.shape == (2,) and info["turn_ended"].all() and list(info["label"]) == ["missing_tool_call"] * 2
    per_env = DictInfoToList(envs).step((ANSWER, ANSWER))[-1]
    assert isinstance(per_env, list) and isinstance(per_env[1]["tools"], list) and per_env[1]["turn"] == 1


def test_the_step_after_an_episode_ends_returns_the_next_reset(envs):
    envs.reset(seed=0)
    for _ in range(50):
        _, reward, terminated, truncated, info = envs.step((ANSWER, ANSWER))
        if terminated.any():
            break
    done = int(np.flatnonzero(terminated)[0])
    assert not truncated[done] and info["labels"][done]
    obs, reward, terminated, truncated, info = envs.step(("", "") if terminated.all() else
                                                         tuple("" if i == done else ANSWER for i in range(2)))
    assert reward[done] == 0 and not terminated[done] and not truncated[done]
    assert obs[done][-1]["role"] == "user" and info["turn"][done] == 0
    assert "turn_ended" not in info or not info["_turn_ended"][done]  # the reset's info, not a step's


def test_mutate_reaches_every_sub_env_through_wrappers(envs):
    states = envs.call("mutate", {"argument_mismatch": 9})
    assert [s.version for s in states] == [1, 1] and all(s.schema_cues for s in states)
    assert [s.version for s in envs.get_attr("interface")] == [1, 1]
    envs.reset(seed=0)


def test_mutate_through_the_wrappers_of_gym_make():
    env = gym.make("seal/Shop-v0", sandbox="inprocess")
    assert env.get_wrapper_attr("mutate")({"argument_mismatch": 9}).version == 1
    assert env.get_wrapper_attr("interface").version == 1
    env.close()


def test_eval_sub_envs_refuse_mutate():
    envs = gym.make_vec("seal/Shop-v0", num_envs=2, vectorization_mode="async", sandbox="inprocess", mode="eval")
    with pytest.raises(RuntimeError, match="original interface"):
        envs.call("mutate", {"pass": 1})
    envs.close()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_chat_observations_of_any_size_cross_processes(method):
    """The mailboxes behind AsyncVectorEnv's shared memory: latest post wins, larger than a pipe's buffer."""
    space, ctx = ChatMessages(), mp.get_context(method)
    boxes = create_shared_memory(space, n=2, ctx=ctx)
    batch = read_from_shared_memory(space, boxes, n=2)
    big = ({"role": "tool", "content": "x" * 300_000},)
    posted, read = ctx.Event(), ctx.Event()
    worker = ctx.Process(target=_post, args=(space, boxes, big, posted, read))
    worker.start()
    assert posted.wait(timeout=60)
    assert copy.deepcopy(batch) == ((), big) and batch[1] == big and len(batch) == 2
    read.set()
    worker.join(timeout=60)
    assert worker.exitcode == 0


def _post(space, boxes, observation, posted, read):
    """An AsyncVectorEnv worker in short: post, answer, live on until the parent has read."""
    write_to_shared_memory(space, 1, ({"role": "user", "content": "old"},), boxes)
    write_to_shared_memory(space, 1, observation, boxes)
    posted.set()
    read.wait(timeout=60)
