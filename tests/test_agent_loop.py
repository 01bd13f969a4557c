"""The ``seal_tool_env`` agent loop run for real (verl's ``AgentLoopBase``, SmolLM2's tokenizer, shop envs in-process)
against a scripted policy server that answers with the task's ground truth in the run's tool format.

Checks what only the agent loop puts together: ``seal.tool_format`` reaches the rendered prompt (SmolLM2's template
drops ``tools=``, so SEAL's template of that format renders them) and the env decodes the same format (the episode
earns reward 1); a training row adopts the interface the closed loop published, an eval row does not.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.workers.rollout.replica import TokenOutput

from seal_envs.formats import get_tool_format
from seal_envs.interface import SCHEMA_INSTRUCTION
from seal_envs.spec import load_domain
from seal_envs.task import load_tasks
from seal_trainer.agent_loop import SealToolEnvAgentLoop
from seal_trainer.cli import compose
from seal_trainer.closed_loop import ClosedLoop
from seal_trainer.data import task_rows
from seal_trainer.envpool import board_drain_rollouts, reset_local_state
from seal_trainer.warm_start import turn_answer

TASK = "shop_base_001"


class GroundTruthServer:
    """verl's LLM server interface (``generate``), answering with the task's ground truth in one tool format:
    each call, then the turn's answer, turn after turn. Keeps every prompt it was given."""

    def __init__(self, tokenizer, task, tool_format: str):
        fmt = get_tool_format(tool_format)
        self.tokenizer = tokenizer
        self.actions = [a for turn in task.turns for a in [fmt.format_calls([c]) for c in turn.ground_truth]
                        + [turn_answer(turn)]]
        self.prompts: list[list[int]] = []

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        text = self.actions.pop(0) + self.tokenizer.eos_token
        return TokenOutput(token_ids=self.tokenizer.encode(text, add_special_tokens=False), stop_reason="completed")


def _task():
    return next(t for t in load_tasks(load_domain("shop").root) if t.id == TASK)


@pytest.fixture(autouse=True)
def fresh_pools_and_board():
    reset_local_state()
    yield
    reset_local_state()


def episode(smollm2_folder, tool_format: str, mode: str = "train"):
    """One row through ``SealToolEnvAgentLoop.run``: (output, decoded first prompt, server)."""
    from transformers import AutoTokenizer

    cfg = compose(overrides=[f"seal.tool_format={tool_format}", f"actor_rollout_ref.model.path={smollm2_folder}",
                             "seal.env.sandbox=inprocess"], cpu=True)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    server = GroundTruthServer(tokenizer, _task(), tool_format)
    (row,) = task_rows([_task()], domain="shop", mode=mode, sandbox="inprocess")

    async def run():
        loop = SealToolEnvAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tokenizer,
                                    processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data))
        return await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], **row)

    out = asyncio.run(run())
    return out, tokenizer.decode(server.prompts[0]), server


@pytest.mark.parametrize("tool_format", ["mistral", "llama3_json", "hermes"])
def test_the_configured_tool_format_reaches_the_prompt_and_the_env(smollm2_folder, tool_format):
    out, prompt, server = episode(smollm2_folder, tool_format)
    fmt = get_tool_format(tool_format)
    others = [get_tool_format(n) for n in ("hermes", "mistral", "llama3_json") if n != tool_format]
    # the tools, offered with this format's instructions for calling them, and no other format's
    assert fmt.template.offer_tail in prompt and "get_product" in prompt
    assert not any(o.template.offer_tail in prompt for o in others)
    assert server.actions == []  # every ground-truth action was asked for
    assert out.reward_score == 1.0, out.extra_fields  # the env decoded the calls in the same format
    assert set(json.loads(out.extra_fields["seal_labels"])) == {"pass"}


def test_a_training_row_adopts_the_published_interface_and_an_eval_row_does_not(smollm2_folder):
    loop = ClosedLoop()
    loop.observe([["argument_mismatch"] * 8], [["state_mismatch"] * 8], [0.0], epoch=0)
    state, _ = loop.update(step=1)
    assert state.schema_cues
    trained, train_prompt, _ = episode(smollm2_folder, "hermes", mode="train")
    evaluated, eval_prompt, _ = episode(smollm2_folder, "hermes", mode="eval")
    assert trained.extra_fields["seal_interface_version"] == state.version and SCHEMA_INSTRUCTION in train_prompt
    assert "[required]" in train_prompt
    assert evaluated.extra_fields["seal_interface_version"] == 0 and SCHEMA_INSTRUCTION not in eval_prompt
    assert "[required]" not in eval_prompt


def test_every_training_episode_reaches_the_closed_loops_profile_and_no_eval_episode(smollm2_folder):
    """The agent loop posts each finished training episode (task, labels, tags, reward) to the board the closed
    loop drains: its failure profile sees every rollout, also those of groups dynamic sampling drops."""
    loop = ClosedLoop()
    loop.start()  # the trainer's first call: makes the job's board
    trained, _, _ = episode(smollm2_folder, "hermes", mode="train")
    episode(smollm2_folder, "hermes", mode="eval")
    (posted,) = board_drain_rollouts(loop.board)
    labels, tags = json.loads(trained.extra_fields["seal_labels"]), json.loads(trained.extra_fields["seal_tags"])
    assert posted == {"task_id": TASK, "labels": labels, "tags": tags, "reward": 1.0, "infrastructure_error": False}
    episode(smollm2_folder, "hermes", mode="train")
    profile, rollouts = loop.observe_posted(epoch=0)
    assert rollouts == 1 and sum(s.count for s in profile.labels.values()) == len(labels)


class LoopingServer:
    """A policy whose every message runs to its token cap (a looping text): answers ``max_tokens`` tokens, stop
    reason ``length``, as the rollout server does. Keeps the sampling parameters it was given."""

    def __init__(self):
        self.params: list[dict] = []

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        self.params.append(dict(sampling_params))
        return TokenOutput(token_ids=[42] * int(sampling_params["max_tokens"]), stop_reason="length")


@pytest.mark.parametrize("cap", [256, 0])
def test_a_message_stops_at_seal_max_message_tokens_and_ends_the_episode(smollm2_folder, cap):
    """``seal.max_message_tokens`` caps each message below the response budget (a looping message would otherwise
    hold its step for the whole budget); a message cut at the cap ends the episode truncated, reward 0."""
    from transformers import AutoTokenizer

    cfg = compose(overrides=[f"actor_rollout_ref.model.path={smollm2_folder}", "seal.env.sandbox=inprocess",
                             f"seal.max_message_tokens={cap}"], cpu=True)
    server = LoopingServer()
    (row,) = task_rows([_task()], domain="shop", mode="train", sandbox="inprocess")

    async def run():
        loop = SealToolEnvAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server,
                                    tokenizer=AutoTokenizer.from_pretrained(smollm2_folder), processor=None,
                                    dataset_cls=None, data_config=DictConfigWrap(cfg.data))
        return await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], **row)

    out = asyncio.run(run())
    budget = int(cfg.data.max_response_length)
    assert [p["max_tokens"] for p in server.params] == [cap or budget]
    assert out.reward_score == 0.0 and out.extra_fields["seal_truncated"] is True
    assert sum(out.response_mask) == (cap or budget)
