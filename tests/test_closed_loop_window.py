"""The closed loop's failure profile: every valid rollout's turns, over the epoch (or the last N steps)."""

from __future__ import annotations

from seal_envs.interface import InterfaceState
from seal_trainer.closed_loop import ClosedLoop
from seal_trainer.envpool import InterfaceBoardImpl

STATE = (["state_mismatch", "pass"], ["state_mismatch", "pass"], 0.0)
SPURIOUS = (["spurious_tool_call"], ["spurious_tool_call"], 0.0)


def observe(loop: ClosedLoop, rollouts, epoch: int, valid=None):
    labels, tags, rewards = zip(*rollouts)
    return loop.observe(labels, tags, rewards, valid, epoch=epoch)


def test_profile_counts_every_turn_of_every_valid_rollout_in_the_epoch():
    loop = ClosedLoop(board=InterfaceBoardImpl())
    step = observe(loop, [STATE] * 5 + [SPURIOUS] * 3, epoch=0, valid=[True] * 7 + [False])
    assert step.tags["state_mismatch"].count == 5 and step.tags["pass"].count == 5
    assert step.tags["spurious_tool_call"].count == 2  # the masked rollout is left out
    observe(loop, [STATE] * 4, epoch=0)
    assert loop.profile().tags["state_mismatch"].count == 9  # the epoch's window holds both steps
    state, changed = loop.update(2)
    assert changed and state.guidelines == ("state_mismatch",)  # 9 turns >= 8, share .82, reward 0
    observe(loop, [SPURIOUS] * 8, epoch=1)  # a new epoch: the window starts again
    assert set(loop.profile().tags) == {"spurious_tool_call"}
    assert loop.update(3)[0].guidelines == ("spurious_tool_call",)


def test_a_window_of_n_steps_keeps_the_last_n():
    loop = ClosedLoop(profile_window=2, board=InterfaceBoardImpl())
    for epoch, rollouts in enumerate(([STATE] * 3, [SPURIOUS] * 3, [SPURIOUS] * 3)):
        observe(loop, rollouts, epoch=epoch)
    assert set(loop.profile().tags) == {"spurious_tool_call"} and loop.profile().tags["spurious_tool_call"].count == 6


def test_training_starts_from_schema_cues_and_publishes_them():
    board = InterfaceBoardImpl()
    loop = ClosedLoop(board=board)
    loop.start()
    assert InterfaceState.from_json(board.interface_json).schema_cues and board.version == 1
    off = ClosedLoop(interface_evolution=False, board=InterfaceBoardImpl())
    off.start()
    assert off.interface.is_original and off.board.version == 0
    observe(off, [STATE] * 9, epoch=0)
    assert off.update(1) == (InterfaceState(), False)


def test_the_profile_counts_rollouts_of_groups_dynamic_sampling_dropped(monkeypatch):
    """The agent loop posts every finished training episode to the board; the closed loop drains them all, so a
    group whose rewards were all equal (dropped by algorithm.filter_groups before the advantage step) counts."""
    import asyncio

    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    import seal_trainer.agent_loop as agent_loop
    from seal_trainer.agent_loop import SealToolEnvAgentLoop, _post_outcome

    board = InterfaceBoardImpl()
    loop = ClosedLoop(board=board)

    def output(labels, tags, reward, infra=False):
        extra = SealToolEnvAgentLoop._extra("t0", labels, tags, infra, False, 1, "train")
        return AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], reward_score=reward,
                               num_turns=2, metrics=AgentLoopMetrics(), extra_fields=extra)

    monkeypatch.setattr(agent_loop, "get_board", lambda: board)  # the job's board (a named Ray actor in training)
    dropped_group = [output(*SPURIOUS, 0.0)] * 4  # all failed: DAPO drops it, it never reaches the batch
    kept_group = [output(*STATE[:2], 0.0), output(["pass", "pass"], ["pass", "pass"], 1.0)] * 2
    infra = [output(["infrastructure_error"], ["infrastructure_error"], 0.0, infra=True)]
    for o in dropped_group + kept_group + infra:
        asyncio.run(_post_outcome(o))
    profile, posted = loop.observe_posted(epoch=0)
    assert posted == 9 and profile.tags["spurious_tool_call"].count == 4  # the dropped group is in the profile
    assert profile.tags["state_mismatch"].count == 2 and profile.tags["pass"].count == 6
    assert "infrastructure_error" not in profile.tags  # masked, as in the batch
    assert loop.observe_posted(epoch=0) is None and board.rollouts == []  # drained once
