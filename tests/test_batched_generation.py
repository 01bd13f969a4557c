"""Batched lockstep generation plays the same episodes as one-at-a-time generation, and the mechanism
benchmark's arms evolve from the original arm's failure profile."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.evaluation.batch_generate import Sampling, load_generator
from seal_envs.evaluation.batched import Job, Limits, play_episodes
from seal_envs.interface import InterfaceState
from seal_envs.spec import load_domain
from seal_trainer.tiny import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", vocab_size=768))


@pytest.fixture(scope="module")
def tasks():
    return list(load_domain("shop").split_tasks("train"))[:3]


def _play(model: str, tasks, batch_size: int, sampling: Sampling = Sampling(), made: list | None = None):
    tokenizer, generator = load_generator(model)

    def make_env():
        env = ToolUseEnv("shop", tasks=tasks, sandbox="inprocess", max_steps_per_turn=4)
        if made is not None:
            made.append(env)
        return env

    jobs = [Job(t.id, s) for t in tasks for s in range(2)]
    # a random model rarely ends a message: keep capped messages, so episodes run several rounds
    limits = Limits(max_new_tokens=12, end_on_cap=False)
    return play_episodes(make_env, jobs, tokenizer, generator, sampling, batch_size, limits), generator


def test_batched_greedy_matches_one_at_a_time(tiny, tasks):
    one, _ = _play(tiny, tasks, batch_size=1)
    made: list[ToolUseEnv] = []
    batched, generator = _play(tiny, tasks, batch_size=4, made=made)
    assert [o.actions for o in batched] == [o.actions for o in one]
    assert [(o.task_id, o.sample, o.reward, o.labels) for o in batched] == \
        [(o.task_id, o.sample, o.reward, o.labels) for o in one]
    assert all(len(o.labels) == len(t.turns) for o, t in zip(batched, [t for t in tasks for _ in range(2)]))
    assert sum(len(o.actions) for o in batched) > len(batched)  # several rounds per episode
    assert generator.reused_tokens > generator.prefill_tokens  # the shared prompt is prefilled once
    assert len(made) == 4 and all(env._done and env._sandbox is None for env in made)  # ended and closed


def test_sampled_runs_are_reproducible(tiny, tasks):
    sampling = Sampling(temperature=1.0, seed=3)
    first, _ = _play(tiny, tasks[:2], batch_size=4, sampling=sampling)
    second, _ = _play(tiny, tasks[:2], batch_size=4, sampling=sampling)
    assert [o.actions for o in first] == [o.actions for o in second]
    assert len({o.actions[0] for o in first}) > 1  # sampled, not greedy


def _mechanism():
    spec = importlib.util.spec_from_file_location("mechanism", ROOT / "benchmarks" / "mechanism.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mechanism_arms_evolve_from_the_original_profile():
    from seal_envs.evaluation.batched import Outcome

    mechanism = _mechanism()
    outcomes = ([Outcome("a", i, 0.0, ["argument_mismatch"], ["state_mismatch"]) for i in range(9)]
                + [Outcome("b", i, 1.0, ["pass"], ["pass"]) for i in range(9)]
                + [Outcome("c", 0, 0.0, ["infrastructure_error"], ["infrastructure_error"], infrastructure_error=True)])
    profile = mechanism.outcomes_profile(outcomes)
    assert profile.tags["state_mismatch"].count == 9 and "infrastructure_error" not in profile.labels
    arms = mechanism.arm_interfaces(profile, mechanism.ARMS)
    evolved = arms["evolved"]
    assert evolved.schema_cues and not evolved.error_hints and evolved.guidelines == ("state_mismatch",)
    assert arms["schema_cues"].schema_cues and not arms["schema_cues"].guidelines
    assert "error_hints" not in arms  # the default gate never turns them on (the reference's main config)
    assert arms["guidelines"].guidelines == evolved.guidelines and not arms["guidelines"].schema_cues
    only_passes = mechanism.arm_interfaces(mechanism.outcomes_profile(outcomes[9:18]), mechanism.ARMS)
    assert only_passes["evolved"].guidelines == ()  # nothing failed: no guideline, only the schema cues


def test_mechanism_summary_counts_groups_with_an_advantage():
    from seal_envs.evaluation.batched import Outcome

    mechanism = _mechanism()
    outcomes = [Outcome("a", 0, 1.0, ["pass"]), Outcome("a", 1, 0.0, ["state_mismatch"]),
                Outcome("b", 0, 0.0, ["missing_tool_call"]), Outcome("b", 1, 0.0, ["infrastructure_error"])]
    summary = mechanism.arm_summary(outcomes, samples=2)
    assert summary["success_rate"] == 0.25 and summary["nonzero_advantage_groups"] == 0.5
    assert summary["turn_pass_rate"] == pytest.approx(1 / 3)


def test_mechanism_weight_table_per_label_and_tag():
    from seal_envs.evaluation.batched import Outcome

    mechanism = _mechanism()
    outcomes = [Outcome("a", 0, 1.0, ["pass"], ["pass"]),
                Outcome("a", 1, 0.0, ["missing_tool_call"], ["empty_turn_model_response"]),
                Outcome("b", 0, 0.0, ["spurious_tool_call"], ["spurious_tool_call"]),
                Outcome("b", 1, 0.0, ["spurious_tool_call"], ["spurious_tool_call"])]
    table = mechanism.weight_table(outcomes)
    assert table["tags"]["empty_turn_model_response"]["w_fixed"] == 1.5
    assert table["labels"]["spurious_tool_call"] == {**table["labels"]["spurious_tool_call"], "rollouts": 2,
                                                     "with_gradient": 0, "w_fixed": 2.0, "w_fixed_grad": None}
    assert table["labels"]["pass"]["with_gradient"] == 1
