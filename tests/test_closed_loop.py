"""The closed loop's environment side: an interface evolved from a step's labels reaches every idle training env
of a worker's pools and no eval env, and survives a checkpoint (``seal_state.json``).

Real shop envs (tools in-process), the real ``EnvPool``s and the process-local interface board that the agent loop
reads outside Ray (the Ray actor board: ``tests/test_trainer_transfer_queue.py``).
"""

from __future__ import annotations

import asyncio

import pytest

from seal_envs.interface import GUIDELINES, SCHEMA_INSTRUCTION, InterfaceState
from seal_trainer.closed_loop import ClosedLoop
from seal_trainer.envpool import EnvSpec, InterfaceBoardImpl, board_get, get_board, get_env_pool, reset_local_state
from seal_trainer.trainer import STATE_FILE

TRAIN = EnvSpec(domain="shop", mode="train", sandbox="inprocess")
EVAL = EnvSpec(domain="shop", mode="eval", sandbox="inprocess")
# a step (labels, tags, reward per rollout) where most turns changed the wrong state and one called a tool it
# should not have: state_mismatch qualifies for a guideline (10 turns, share 10/11, reward 0), the spurious call not
STEP = [(["argument_mismatch"] * 2, ["state_mismatch"] * 2, 0.0)] * 5 + [
    (["spurious_tool_call", "pass"], ["spurious_tool_call", "pass"], 0.0)]


def observe(loop: ClosedLoop, rollouts, epoch: int = 0) -> None:
    labels, tags, rewards = zip(*rollouts)
    loop.observe(labels, tags, rewards, epoch=epoch)


def only(label: str, tag: str, turns: int = 9):
    return [([label] * turns, [tag] * turns, 0.0)]


@pytest.fixture(autouse=True)
def fresh_pools_and_board():
    reset_local_state()
    yield
    reset_local_state()


async def fill(pool, n: int) -> list:
    """n envs made, used and given back: the pool's idle envs."""
    envs = [await pool.acquire() for _ in range(n)]
    for env in envs:
        await pool.release(env)
    return envs


async def take_idle(pool) -> list:
    """Every idle env of the pool, as the next episodes would get them (then given back)."""
    envs = [await pool.acquire() for _ in range(len(pool._idle))]
    for env in envs:
        await pool.release(env)
    return envs


async def adopt_published(pool) -> bool:
    """What the agent loop does before an episode (``SealToolEnvAgentLoop.run``): read the board, apply if newer."""
    version, doc = await board_get(get_board(), pool.interface_version)
    return pool.apply_interface(doc, version)


def system_prompt(env) -> str:
    obs, _ = env.reset(options={"task_id": "shop_base_001"})
    return obs[0]["content"] if obs[0]["role"] == "system" else ""


def test_a_published_interface_reaches_every_idle_training_env_and_no_eval_env():
    train, evals = get_env_pool(TRAIN), get_env_pool(EVAL)

    async def scenario():
        train_envs, eval_envs = await fill(train, 3), await fill(evals, 2)
        loop = ClosedLoop()
        observe(loop, STEP)
        state, changed = loop.update(step=1)
        assert changed and state.schema_cues and state.guidelines  # the profile asks for cues
        assert await adopt_published(train) and not await adopt_published(evals)
        adopted, untouched = await take_idle(train), await take_idle(evals)
        assert {id(e) for e in adopted} == {id(e) for e in train_envs}
        assert {id(e) for e in untouched} == {id(e) for e in eval_envs}
        return state, adopted, untouched

    state, adopted, untouched = asyncio.run(scenario())
    for env in adopted:
        assert env.unwrapped.interface == state
        prompt = system_prompt(env)
        assert SCHEMA_INSTRUCTION in prompt and all(GUIDELINES[g] in prompt for g in state.guidelines)
        _, info = env.reset(options={"task_id": "shop_base_001"})
        assert any("[required]" in t["function"]["description"] + str(t["function"]["parameters"])
                   for t in info["tools"])
    for env in untouched:
        assert env.unwrapped.interface == InterfaceState()
        assert SCHEMA_INSTRUCTION not in system_prompt(env)


def test_an_env_made_after_the_publication_adopts_it_too():
    train = get_env_pool(TRAIN)

    async def scenario():
        loop = ClosedLoop()
        observe(loop, STEP)
        state, _ = loop.update(step=1)
        await adopt_published(train)
        env = await train.acquire()  # none idle: a new env
        await train.release(env)
        return state, env

    state, env = asyncio.run(scenario())
    assert train.created == 1 and env.unwrapped.interface == state


def test_only_a_newer_version_is_adopted():
    train = get_env_pool(TRAIN)

    async def scenario():
        await fill(train, 1)
        loop = ClosedLoop()
        observe(loop, STEP)
        loop.update(step=1)
        assert await adopt_published(train)
        assert not await adopt_published(train)  # nothing new on the board
        observe(loop, only("spurious_tool_call", "spurious_tool_call"), epoch=1)  # a new epoch: a new window
        loop.update(step=2)
        assert await adopt_published(train)
        return loop.interface, await take_idle(train)

    state, (env,) = asyncio.run(scenario())
    assert env.unwrapped.interface == state and state.guidelines == ("spurious_tool_call",)


@pytest.mark.parametrize("closed_loop_update", [True, False])
def test_the_interface_survives_a_save_and_restore(tmp_path, closed_loop_update):
    """A resumed job (new process: empty board, new pools) restores and republishes the saved interface."""
    loop = ClosedLoop(closed_loop_update=closed_loop_update, profile_window=2, board=InterfaceBoardImpl())
    for rollouts in (STEP, only("spurious_tool_call", "spurious_tool_call")):
        observe(loop, rollouts)
        loop.update()
    path = tmp_path / "global_step_2" / STATE_FILE
    path.parent.mkdir()
    loop.save(path, {"step": 2})

    restored = ClosedLoop(closed_loop_update=closed_loop_update, profile_window=2)
    doc = restored.load(path)
    assert doc["step"] == 2 and restored.interface == loop.interface and not restored.interface.is_original
    assert restored.updates == loop.updates and restored.profile() == loop.profile()
    train = get_env_pool(TRAIN)

    async def resumed():
        await fill(train, 2)
        assert await adopt_published(train)  # load republished it for the workers
        return await take_idle(train)

    assert all(env.unwrapped.interface == loop.interface for env in asyncio.run(resumed()))
    # the switch still holds after the restore: a frozen interface stays frozen
    observe(restored, only("missing_tool_call", "empty_turn_model_response"))
    state, changed = restored.update()
    assert changed == closed_loop_update and (state == loop.interface) != closed_loop_update


def test_an_original_interface_is_restored_without_publishing(tmp_path):
    loop = ClosedLoop(interface_evolution=False, board=InterfaceBoardImpl())
    observe(loop, STEP)
    loop.update()
    loop.save(tmp_path / STATE_FILE)
    board = InterfaceBoardImpl()
    restored = ClosedLoop(interface_evolution=False, board=board)
    restored.load(tmp_path / STATE_FILE)
    assert restored.interface.is_original and board.history == []


def test_the_loop_profiles_every_posted_training_episode_but_infrastructure_failures():
    """``observe_posted`` drains what the agent loop posted (labels, tags, reward; infrastructure failures left
    out) into the window, once: the closed loop's view of a step when dynamic sampling dropped groups."""
    from seal_envs.interface import FailureProfile

    board = InterfaceBoardImpl()
    loop = ClosedLoop(board=board)
    assert loop.observe_posted(epoch=0) is None  # nothing posted: the trainer observes its batch instead
    posted = [(["state_mismatch"], ["state_mismatch"], 0.0, False), (["pass"], ["pass"], 1.0, False),
              (["argument_mismatch"], ["state_mismatch"], 0.0, True)]
    for labels, tags, reward, infra in posted:
        board.post_rollout({"labels": labels, "tags": tags, "reward": reward, "infrastructure_error": infra})
    profile, n = loop.observe_posted(epoch=0)
    assert n == 3 and profile == FailureProfile.from_rollouts([p[:3] for p in posted[:2]])
    assert loop.profile() == profile and loop.epoch == 0 and loop.observe_posted(epoch=0) is None


def test_the_window_is_the_epoch_or_the_last_n_steps():
    by_epoch = ClosedLoop(board=InterfaceBoardImpl())
    observe(by_epoch, STEP, epoch=0)
    observe(by_epoch, only("spurious_tool_call", "spurious_tool_call"), epoch=0)
    assert len(by_epoch.window) == 2
    by_epoch.observe([["pass"]], [["pass"]], [1.0])  # no epoch given: the current one goes on
    assert len(by_epoch.window) == 3 and by_epoch.epoch == 0
    observe(by_epoch, STEP, epoch=1)
    assert len(by_epoch.window) == 1 and by_epoch.epoch == 1
    last_two = ClosedLoop(profile_window=2, board=InterfaceBoardImpl())
    for epoch in (0, 1, 2):
        observe(last_two, only("spurious_tool_call", "spurious_tool_call", turns=epoch + 1), epoch=epoch)
    assert [p.tags["spurious_tool_call"].count for p in last_two.window] == [2, 3]


def test_switches_keep_the_original_or_the_first_evolved_interface():
    off = ClosedLoop(interface_evolution=False, board=InterfaceBoardImpl())
    assert off.interface.is_original  # no schema cues from the start either
    observe(off, STEP)
    assert off.update() == (off.interface, False) and off.interface.is_original
    once = ClosedLoop(closed_loop_update=False, board=InterfaceBoardImpl())
    observe(once, STEP)
    first, changed = once.update()
    assert changed and once.updates == 1 and once.frozen
    observe(once, only("spurious_tool_call", "spurious_tool_call"))
    assert once.update() == (first, False) and once.updates == 1
