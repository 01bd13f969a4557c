"""SEAL advantage reweighting: hand-computed weights, GRPO masking, sign preservation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seal_trainer.advantage import (
    FIXED_RHO, DynamicRho, ReweightConfig, Reweighter, informative_groups, label_shares, seal_grpo_advantage,
    trajectory_weight,
)


def test_fixed_rho_paper_values():
    assert FIXED_RHO["spurious_tool_call"] == 2.0 and FIXED_RHO["correct_abstention"] == 1.8
    assert FIXED_RHO["empty_turn_model_response"] == 1.5 and FIXED_RHO["instance_mismatch"] == 0.6
    assert FIXED_RHO["response_mismatch"] == 0.9 and FIXED_RHO["pass"] == 1.0


@pytest.mark.parametrize("labels, expected", [
    ([], 1.0),                                                   # no labels -> w = 1
    (["pass", "pass"], 1.0),
    (["spurious_tool_call"], 2.0),
    (["instance_mismatch"], 0.6),
    (["instance_mismatch", "instance_mismatch", "instance_mismatch", "response_mismatch"], 0.675),  # .75*.6+.25*.9
    (["spurious_tool_call", "empty_turn_model_response"], 1.75),  # (2.0 + 1.5) / 2
    (["argument_mismatch", "response_mismatch"], 0.95),          # other labels: rho 1.0
    (["infrastructure_error"], 1.0),                             # excluded -> no labels -> 1
    (["task_error", "spurious_tool_call"], 2.0),                 # excluded label left out of p_j
])
def test_weight_hand_computed(labels, expected):
    assert trajectory_weight(labels) == pytest.approx(expected)


def test_weight_clipped():
    rho = {"a": 10.0, "b": 0.01}
    assert trajectory_weight(["a"], rho) == 2.0
    assert trajectory_weight(["b"], rho) == 0.5
    assert trajectory_weight(["a"], rho, w_max=3.0) == 3.0


def test_label_shares():
    assert label_shares(["pass", "pass", "state_mismatch", "infrastructure_error"]) == {
        "pass": pytest.approx(2 / 3), "state_mismatch": pytest.approx(1 / 3)}


def _rewards(values):
    r = torch.zeros(len(values), 5)
    r[:, -1] = torch.tensor(values, dtype=torch.float32)
    return r


def test_grpo_weighted_hand_computed():
    rewards = _rewards([1.0, 0.0, 0.0, 1.0])
    mask = torch.ones(4, 5)
    index = ["a", "a", "b", "b"]
    weights = [2.0, 0.5, 1.0, 0.6]
    adv, ret = seal_grpo_advantage(rewards, mask, index, weights=weights, epsilon=0.0)
    std = torch.tensor([1.0, 0.0]).std().item()  # unbiased std of {1, 0}
    expected = torch.tensor([0.5 / std * 2.0, -0.5 / std * 0.5, -0.5 / std * 1.0, 0.5 / std * 0.6])
    assert torch.allclose(adv[:, 0], expected, atol=1e-5)
    assert torch.equal(adv, ret)


def test_infrastructure_samples_masked_from_group():
    rewards = _rewards([1.0, 0.0, 0.0])
    mask = torch.ones(3, 5)
    adv, _ = seal_grpo_advantage(rewards, mask, ["g"] * 3, valid=[True, True, False], epsilon=0.0)
    std = torch.tensor([1.0, 0.0]).std().item()
    assert adv[2].abs().sum() == 0  # masked sample: no advantage
    assert adv[0, 0].item() == pytest.approx(0.5 / std)  # group mean over valid samples only: 0.5
    adv_single, _ = seal_grpo_advantage(rewards, mask, ["g"] * 3, valid=[True, False, False])
    assert adv_single.abs().sum() == 0  # one valid sample: no baseline


def test_sign_and_ranking_preserved():
    gen = torch.Generator().manual_seed(0)
    labels_pool = list(FIXED_RHO) + ["argument_mismatch", "invalid_tool_call", "recovery_failure"]
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 8
        rewards = _rewards(torch.randint(0, 2, (n,), generator=gen).float().tolist())
        mask = torch.ones(n, 5)
        index = [i // 4 for i in range(n)]
        labels = [list(rng.choice(labels_pool, size=rng.integers(0, 4))) for _ in range(n)]
        w = Reweighter().weights(labels)
        assert (w >= 0.5).all() and (w <= 2.0).all()
        base, _ = seal_grpo_advantage(rewards, mask, index)
        weighted, _ = seal_grpo_advantage(rewards, mask, index, weights=w)
        assert torch.equal(torch.sign(base), torch.sign(weighted))
        scores = rewards.sum(-1)
        for g in set(index):
            members = [i for i in range(n) if index[i] == g]
            for i in members:
                for j in members:
                    if scores[i] > scores[j]:
                        assert weighted[i, 0] > 0 >= weighted[j, 0] or weighted[i, 0] >= 0 > weighted[j, 0]


def test_nonpositive_weights_rejected():
    with pytest.raises(ValueError):
        seal_grpo_advantage(_rewards([1.0, 0.0]), torch.ones(2, 5), [0, 0], weights=[1.0, 0.0])


def test_reweighting_off_gives_ones():
    rw = Reweighter(ReweightConfig(enable=False))
    assert (rw.weights([["spurious_tool_call"], []]) == 1.0).all()


def test_dynamic_rho_ema_hand_computed():
    d = DynamicRho(confidence_count=32)
    # 4 turns: 2 spurious_tool_call (trajectory reward 0), 2 pass (trajectory reward 1)
    d.update([["spurious_tool_call", "spurious_tool_call"], ["pass", "pass"]], [0.0, 1.0])
    # spurious: prevalence .5, mean reward 0, confidence 2/32 -> target 2.0*(1+.5*1*(1/16)) clipped to 2.0
    assert d.get("spurious_tool_call") == pytest.approx(2.0)
    # pass: mean reward 1 -> target = base 1.0 -> EMA stays 1.0
    assert d.get("pass") == pytest.approx(1.0)
    d2 = DynamicRho()
    d2.update([["state_mismatch"] * 32], [0.0])  # prevalence 1, confidence 1 -> target 1*(1+1)=2.0
    assert d2.get("state_mismatch") == pytest.approx(0.75 * 1.0 + 0.25 * 2.0)
    d3 = DynamicRho.from_json(d2.to_json())
    assert d3.get("state_mismatch") == pytest.approx(d2.get("state_mismatch"))


def test_registered_estimator_reachable_from_verl():
    import verl  # noqa: F401  (loads the plugin)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn("seal_grpo")
    adv, _ = fn(token_level_rewards=_rewards([1.0, 0.0]), response_mask=torch.ones(2, 5), index=np.array([0, 0]))
    assert adv[0, 0] > 0 > adv[1, 0]


def test_informative_groups_count_groups_whose_valid_rewards_differ():
    uids = ["a", "a", "b", "b", "c", "c"]
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert informative_groups(uids, rewards) == (2, 3)
    # the only failure of group "c" is an infrastructure error: what is left has no spread
    assert informative_groups(uids, rewards, valid=[True, True, True, True, True, False]) == (1, 3)
