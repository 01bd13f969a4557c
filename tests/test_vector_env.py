"""Vector envs through Gymnasium's own entry points: async and sync, info, autoreset, mutate through wrappers."""

from __future__ import annotations

import copy
import multiprocessing as mp
import random

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
from gymnasium.wrappers.vector import DictInfoToList

import seal_envs  # noqa: F401  (registers the ids)
from seal_envs.spaces import ChatMessages

ANSWER = "I can't help with that."  # a scripted policy: every step answers, so every step ends a user turn
ACTIONS = (  # what a policy in training sends: calls good and bad, answers, garbage, nothing
    '<tool_call>{"name": "view_cart", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "search_products", "arguments": {"query": "mug"}}</tool_call>',
    '<tool_call>{"name": "get_product", "arguments": {"product_id": 7}}</tool_call>',  # wrong type
    '<tool_call>{"name": "checkout", "arguments": {"shipping_speed": "warp"}}</tool_call>',  # missing, bad enum
    '<tool_call>{"name": "teleport", "arguments": {}}</tool_call>',  # no such tool
    '<tool_call>{"name": "view_cart", "arguments": {</tool_call>',  # malformed
    '<tool_call>{"name": "get_account", "arguments": {}}</tool_call>\n<tool_call>{"name": "list_orders", '
    '"arguments": {"status": "shipped"}}</tool_call>',
    ANSWER, "Done.", "", "   ", "\x00\ufffd garbage {{[", "<tool_call>",
)


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


def _assert_merged(merged: dict, i: int, single: dict) -> None:
    """Env i's slice of Gymnasium's merged info is exactly its own info: every key present with its value,
    nothing else marked present (masks ``_key``), nested dicts likewise."""
    for key, value in single.items():
        assert merged[f"_{key}"][i], key
        if isinstance(value, dict) and key != "final_obs":
            _assert_merged(merged[key], i, value)
        else:
            assert merged[key][i] == value, (key, merged[key][i], value)
    present = {k for k in merged if not k.startswith("_") and merged[f"_{k}"][i]}
    assert present == set(single), present ^ set(single)


def _reference_step(env, action: str, autoreset: AutoresetMode, ended: bool):
    """What Gymnasium's vector env must return for one sub-env, played on its own."""
    if autoreset == AutoresetMode.NEXT_STEP and ended:
        obs, info = env.reset()
        return obs, 0.0, False, False, info
    obs, reward, terminated, truncated, info = env.step(action)
    if autoreset == AutoresetMode.SAME_STEP and (terminated or truncated):
        final_obs, final_info = obs, info
        obs, info = env.reset()
        info = {"final_info": final_info, "final_obs": final_obs, **info}
    return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("autoreset", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_any_mix_of_actions_merges_like_each_env_alone(backend, vectorization, autoreset):
    """Seeded random mixes of calls, answers, garbage and empty text over many steps: Gymnasium's own vector
    env returns, for every sub-env, exactly what that env returns alone (episodes end at different steps)."""
    num_envs, steps, rng = 3, 40, random.Random(25)
    envs = gym.make_vec("seal/Shop-v0", num_envs=num_envs, vectorization_mode=vectorization, sandbox=backend,
                        vector_kwargs={"autoreset_mode": autoreset})
    alone = [gym.make("seal/Shop-v0", sandbox=backend) for _ in range(num_envs)]
    try:
        obs, info = envs.reset(seed=7)
        for i, env in enumerate(alone):
            _assert_merged(info, i, env.reset(seed=7 + i)[1])
        ended, labels_seen = [False] * num_envs, set()
        for _ in range(steps):
            actions = tuple(rng.choice(ACTIONS) for _ in range(num_envs))
            obs, reward, terminated, truncated, info = envs.step(actions)
            for i, env in enumerate(alone):
                expected = _reference_step(env, actions[i], autoreset, ended[i])
                assert obs[i] == expected[0] and reward[i] == expected[1]
                assert (terminated[i], truncated[i]) == expected[2:4]
                _assert_merged(info, i, expected[4])
                ended[i] = bool(expected[2] or expected[3])
            labels_seen |= {str(label) for label, on in zip(info.get("label", ()), info.get("_label", ())) if on}
        assert len(labels_seen) >= 3, labels_seen  # the mix really differed between envs and steps
    finally:
        envs.close()
        for env in alone:
            env.close()


def test_close_after_a_sub_env_failure_is_prompt_and_leaves_no_container(backend):
    """A sub-env that raises (here: an unknown task id) surfaces in the parent; ``close()`` then returns at once
    and the workers' sandboxes are gone."""
    import time

    envs = gym.make_vec("seal/Shop-v0", num_envs=2, vectorization_mode="async", sandbox=backend)
    envs.reset(seed=0)
    envs.step((ACTIONS[0], ANSWER))
    workers = [str(p.pid) for p in envs.processes]
    with pytest.raises(ValueError, match="unknown task_id"):
        envs.reset(options={"task_id": "no-such-task"})
    start = time.monotonic()
    envs.close()
    assert time.monotonic() - start < 30
    if backend == "docker":
        import docker

        from seal_envs.sandbox.reaper import LABEL, OWNER_PID

        listed = docker.from_env().api.containers(all=True, filters={"label": f"{LABEL}=1"})
        assert not [c["Id"] for c in listed if c["Labels"].get(OWNER_PID) in workers]
