"""SEAL's trainer step on real tensors: the advantages it writes are w times GRPO's, and each ablation switches off
exactly what it names.

``SealPPOTrainer._seal_advantage`` is the trainer's advantage step minus its two TransferQueue calls: it takes the
fields as TransferQueue returns them (jagged ``response_mask``/``rm_scores``, ``uid`` strings) and the agent loop's
extra fields, and returns the ``advantages``/``returns`` written back (``tests/test_trainer_transfer_queue.py``
runs the same step through a real TransferQueue). The trainer's SEAL state is built by its own ``_init_seal`` from
the composed ``seal-train`` config; verl's workers are not started.
"""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from seal_trainer.advantage import FIXED_RHO
from seal_trainer.cli import compose
from seal_trainer.config import ABLATIONS
from seal_trainer.envpool import InterfaceBoardImpl
from seal_trainer.trainer import SealPPOTrainer

# two groups of GRPO rollouts: reward, response length, turn labels, infrastructure failure
ROLLOUTS = [
    ("a", 1.0, 3, ["spurious_tool_call"], False),
    ("a", 0.0, 2, ["instance_mismatch"], False),
    ("a", 0.0, 4, ["state_mismatch"], True),  # masked: out of its group, advantage 0
    ("b", 0.0, 2, ["empty_turn_model_response", "pass"], False),
    ("b", 1.0, 5, ["pass", "pass"], False),
]
# w by hand from the paper's fixed rho (seal.reweighting.rho=fixed): p_j(z) * rho(z) summed, clipped to [0.5, 2]
HAND_W = [2.0, 0.6, 1.0, (1.5 + 1.0) / 2, 1.0]


def trainer_for(tmp_path, *overrides: str) -> SealPPOTrainer:
    cfg = compose(overrides=[f"trainer.default_local_dir={tmp_path}", *overrides], cpu=True)
    trainer = object.__new__(SealPPOTrainer)  # no verl workers: only SEAL's own state
    trainer.config = cfg
    trainer._init_seal(cfg)
    return trainer


def jagged(rows) -> torch.Tensor:
    return torch.nested.as_nested_tensor([torch.tensor(r) for r in rows], layout=torch.jagged)


def step_fields(rollouts=ROLLOUTS) -> tuple[TensorDict, list[dict]]:
    """The step's fields as TransferQueue returns them, and the agent loop's extra fields."""
    scores = [[0.0] * (n - 1) + [r] for _, r, n, _, _ in rollouts]  # the reward sits on the last response token
    data = TensorDict({"uid": NonTensorStack(*[u for u, *_ in rollouts]),
                       "response_mask": jagged([[1] * n for _, _, n, _, _ in rollouts]),
                       "rm_scores": jagged(scores)}, batch_size=len(rollouts))
    extras = [{"seal_labels": json.dumps(labels), "seal_tags": json.dumps(labels), "seal_infrastructure_error": infra}
              for *_, labels, infra in rollouts]  # these labels are tag names too
    return data, extras


def grpo_by_hand(rollouts=ROLLOUTS) -> list[float]:
    """GRPO over each group's valid samples: (r - mean) / (unbiased std + 1e-6)."""
    out = []
    for uid, r, _, _, infra in rollouts:
        group = torch.tensor([g[1] for g in rollouts if g[0] == uid and not g[4]], dtype=torch.float64)
        out.append(0.0 if infra else float((r - group.mean()) / (group.std() + 1e-6)))
    return out


def written_advantages(trainer, rollouts=ROLLOUTS) -> tuple[list[float], TensorDict]:
    """Per rollout: the advantage the step writes (the same on every response token, checked here)."""
    data, extras = step_fields(rollouts)
    out = trainer._seal_advantage(data, extras, {})
    per_rollout = []
    for adv, ret, (*_, n, _, _) in zip(out["advantages"].unbind(), out["returns"].unbind(), rollouts):
        assert adv.shape == (n,) and torch.equal(adv, ret)
        assert torch.allclose(adv, adv[0].expand(n))
        per_rollout.append(float(adv[0]))
    return per_rollout, out


def test_the_written_advantage_is_w_times_grpo(tmp_path):
    trainer = trainer_for(tmp_path, "seal.reweighting.rho=fixed")
    assert [FIXED_RHO[z] for z in ("spurious_tool_call", "instance_mismatch")] == HAND_W[:2]
    advantages, _ = written_advantages(trainer)
    expected = [w * a for w, a in zip(HAND_W, grpo_by_hand())]
    assert advantages == pytest.approx(expected, abs=1e-5)
    assert advantages[0] != pytest.approx(grpo_by_hand()[0])  # the weights changed what GRPO alone gives
    assert trainer._seal_step["weights"] == pytest.approx(HAND_W, abs=1e-4)  # and the log says so


def test_the_masked_response_tokens_get_no_advantage(tmp_path):
    trainer = trainer_for(tmp_path)
    rollouts = [("a", 1.0, 3, ["pass"], False), ("a", 0.0, 3, ["pass"], False)]
    data, extras = step_fields(rollouts)
    mask = [[1, 0, 1], [0, 1, 1]]  # tool output tokens in the middle of a response: mask 0
    data["response_mask"] = jagged(mask)
    out = trainer._seal_advantage(data, extras, {})
    for adv, m in zip(out["advantages"].unbind(), mask):
        assert torch.equal(adv == 0, torch.tensor(m) == 0)


def test_the_step_metrics_count_what_grpo_could_use(tmp_path):
    trainer = trainer_for(tmp_path, "seal.reweighting.rho=fixed")
    metrics: dict[str, float] = {}
    data, extras = step_fields()
    trainer._seal_advantage(data, extras, metrics)
    assert metrics["seal/infrastructure_errors"] == 1.0
    assert metrics["seal/informative_groups"] == 2.0 and metrics["seal/groups"] == 2.0
    assert metrics["seal/reward_mean"] == pytest.approx(0.5)  # the 4 valid rollouts
    assert metrics["seal/w_all/max"] == 2.0 and metrics["seal/w_all/min"] == 0.6 and metrics["seal/w_all/n"] == 4
    assert metrics["seal/w_grad/n"] == 4  # both groups have a reward spread: every valid rollout has a gradient


def test_a_batch_without_tags_is_refused_not_trained_as_plain_grpo(tmp_path):
    trainer = trainer_for(tmp_path)
    data, extras = step_fields()
    with pytest.raises(ValueError, match="seal_tool_env agent loop"):
        trainer._seal_advantage(data, [{"seal_labels": e["seal_labels"]} for e in extras], {})


@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_each_ablation_switches_off_exactly_what_it_names(tmp_path, ablation):
    """Against ``full``: the switches that differ are the ablation's, and each acts where it should."""
    full = ABLATIONS["full"]
    named = {
        "full": set(), "vanilla": {"interface_evolution", "reweighting", "closed_loop_update"},
        "no_evolution": {"interface_evolution"}, "no_reweighting": {"reweighting"}, "fixed_rho": set(),
        "no_closed_loop": {"closed_loop_update"},
    }[ablation]
    trainer = trainer_for(tmp_path, f"seal.ablation={ablation}")
    assert {k for k, v in trainer.switches.items() if v != full[k]} == named
    assert trainer.reweighter.config.rho == ("fixed" if ablation == "fixed_rho" else "dynamic")

    # reweighting: the written advantages are w * GRPO (fixed rho: the hand values), or GRPO itself
    advantages, _ = written_advantages(trainer)
    grpo = grpo_by_hand()
    if "reweighting" in named:
        assert advantages == pytest.approx(grpo, abs=1e-5)
    elif ablation == "fixed_rho":
        assert advantages == pytest.approx([w * a for w, a in zip(HAND_W, grpo)], abs=1e-5)
    else:  # dynamic rho moved every tag once towards its target: not the fixed values, the same signs
        assert advantages != pytest.approx([w * a for w, a in zip(HAND_W, grpo)], abs=1e-5)
        assert [a > 0 for a in advantages] == [a > 0 for a in grpo]

    # interface evolution and the closed loop: an epoch of state mismatches, then one of spurious calls
    loop = trainer.closed_loop
    loop.board = InterfaceBoardImpl()
    versions = []
    for epoch, tag in ((0, "state_mismatch"), (0, "state_mismatch"), (1, "spurious_tool_call"),
                       (1, "spurious_tool_call")):
        loop.observe([[tag] * 8], [[tag] * 8], [0.0], epoch=epoch)
        state, _ = loop.update()
        versions.append(state)
    if "interface_evolution" in named:
        assert all(s.is_original for s in versions) and loop.board.history == []
    elif "closed_loop_update" in named:  # evolved once, from the first profile, then fixed
        assert versions[0].guidelines == ("state_mismatch",) and all(s == versions[0] for s in versions)
        assert len(loop.board.history) == 1
    else:  # the interface follows the failures of the epoch's window
        assert versions[0].schema_cues and versions[0].guidelines == ("state_mismatch",)
        assert versions[-1].guidelines == ("spurious_tool_call",)
        assert len(loop.board.history) == 4


def test_the_trainer_refuses_a_kl_reward_with_seal_advantages(tmp_path):
    with pytest.raises(ValueError, match="use_kl_loss"):
        trainer_for(tmp_path, "algorithm.use_kl_in_reward=true")


def test_the_step_reads_labels_tags_and_flags_from_the_agent_loop(tmp_path):
    """Labels (ours) and tags (the reference's) are different fields and both reach the closed loop's profile;
    truncation is counted and a rollout that does not say it failed on infrastructure is valid (found by mutation
    testing: the step test's labels and tags were the same names)."""
    trainer = trainer_for(tmp_path)
    data, extras = step_fields([("a", 1.0, 2, ["pass"], False), ("a", 0.0, 2, ["state_mismatch"], False)])
    extras[1] = {"seal_labels": json.dumps(["argument_mismatch"]), "seal_tags": json.dumps(["state_mismatch"]),
                 "seal_truncated": True}
    metrics: dict[str, float] = {}
    trainer._seal_advantage(data, extras, metrics)
    profile = trainer.closed_loop.profile()
    assert set(profile.labels) == {"pass", "argument_mismatch"} and set(profile.tags) == {"pass", "state_mismatch"}
    assert metrics["seal/truncated"] == 1.0 and metrics["seal/infrastructure_errors"] == 0.0


@pytest.mark.parametrize("overrides, rewards, updates", [
    ((), (1.0, 0.0), True),                                             # an informative group: verl's update runs
    ((), (0.0, 0.0), False),                                            # no row has a gradient: no optimizer step
    (("seal.skip_gradientless_updates=false",), (0.0, 0.0), True),      # verl's behaviour: Adam steps on momentum
    (("actor_rollout_ref.actor.use_kl_loss=true",), (0.0, 0.0), True),  # the KL loss has a gradient of its own
])
def test_a_step_without_gradient_runs_no_update(tmp_path, monkeypatch, overrides, rewards, updates):
    from types import SimpleNamespace

    from verl.trainer.ppo.v1 import trainer_base

    calls = []
    parent = next(c for c in SealPPOTrainer.__mro__[1:] if "_update_actor" in vars(c))
    assert parent.__module__ == trainer_base.__name__  # verl's own update, which the skip stands in front of
    monkeypatch.setattr(parent, "_update_actor", lambda self, batch, metrics: calls.append(batch.extra_info) or batch)
    trainer = trainer_for(tmp_path, *overrides)
    rollouts = [(u, r, 2, ["pass" if r else "state_mismatch"], False) for u in "ab" for r in rewards]
    trainer._seal_advantage(*step_fields(rollouts), {})
    metrics = {}
    trainer._update_actor(SimpleNamespace(extra_info={}), metrics)
    assert bool(calls) == updates and metrics["seal/update_skipped"] == float(not updates)
    assert trainer._seal_step["gradient_rows"] == (4 if rewards == (1.0, 0.0) else 0)
