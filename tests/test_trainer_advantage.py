"""SEAL advantage reweighting: hand-computed weights, GRPO masking, sign preservation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seal_trainer.advantage import (
    FIXED_RHO, DynamicRho, ReweightConfig, Reweighter, in_informative_group, informative_groups, label_shares,
    seal_grpo_advantage, trajectory_weight, weight_metrics,
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
    (["checker_error", "response_mismatch"], 0.9),               # excluded tag left out of p_j
    (["infrastructure_error"], 1.0),                             # excluded -> no tags -> 1
    (["gt_error", "spurious_tool_call"], 2.0),                   # the task's fault left out of p_j
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
    labels_pool = list(FIXED_RHO) + ["gt_error", "infrastructure_error"]
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 8
        rewards = _rewards(torch.randint(0, 2, (n,), generator=gen).float().tolist())
        mask = torch.ones(n, 5)
        index = [i // 4 for i in range(n)]
        labels = [list(rng.choice(labels_pool, size=rng.integers(0, 4))) for _ in range(n)]
        w = Reweighter(ReweightConfig(rho="fixed")).weights(labels)
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
    assert (rw.weights([["spurious_tool_call"], []], [0.0, 1.0]) == 1.0).all()


# A: tags [state, state, pass], reward 0; B: [state, response], reward 1. Window: state 3 turns (reward sum 1),
# pass 1 (0), response 1 (1); 5 turns. With confidence_count 4: state's prevalence .6, mean reward 1/3,
# confidence .75 -- all strictly between 0 and 1.
BATCH = ([["state_mismatch", "state_mismatch", "pass"], ["state_mismatch", "response_mismatch"]], [0.0, 1.0])


def test_dynamic_rho_hand_computed_with_prevalence_and_confidence_inside_0_1():
    d = DynamicRho(confidence_count=4)
    d.update(*BATCH)
    target = 1.0 * (1 + 1.0 * 0.6 * (1 - 1 / 3) * 0.75)  # 1.3
    assert d.get("state_mismatch") == pytest.approx(0.75 * 1.0 + 0.25 * target)  # 1.075
    assert d.get("response_mismatch") == pytest.approx(0.9)  # mean reward 1: target = base
    assert d.get("pass") == pytest.approx(1.0)  # pass targets its base
    assert d.get("spurious_tool_call") == pytest.approx(2.0)  # absent: prevalence 0, target = base
    d.update(*BATCH)  # the window now holds both batches: state 6 of 10 turns, confidence min(1, 6/4) = 1
    assert d.get("state_mismatch") == pytest.approx(0.75 * 1.075 + 0.25 * (1 + 0.6 * (2 / 3)))  # 1.15625


def test_dynamic_rho_moves_every_known_tag_and_decays_absent_ones_to_base():
    d = DynamicRho(base={**FIXED_RHO}, confidence_count=4, current={"state_mismatch": 1.5, "instance_mismatch": 1.2})
    d.update([["pass", "pass"]], [1.0])  # state and instance absent from the window: prevalence 0
    assert d.get("state_mismatch") == pytest.approx(0.75 * 1.5 + 0.25 * 1.0)
    assert d.get("instance_mismatch") == pytest.approx(0.75 * 1.2 + 0.25 * 0.6)


def test_a_new_epoch_starts_a_new_window():
    rw = Reweighter(ReweightConfig(rho="dynamic", confidence_count=4))
    rw.weights(*BATCH, epoch=0)
    rw.weights(*BATCH, epoch=0)
    assert rw.rho["state_mismatch"] == pytest.approx(1.15625)
    rw.weights([["pass"]], [1.0], epoch=1)  # window reset: state absent -> decays towards base 1.0
    assert rw.rho["state_mismatch"] == pytest.approx(0.75 * 1.15625 + 0.25 * 1.0)
    assert sum(rw.dynamic.window.count.values()) == 1


def test_clip_bounds_from_the_config_reach_dynamic_rho_and_weights():
    rw = Reweighter(ReweightConfig(rho="dynamic", confidence_count=4, w_max=1.2))
    w = rw.weights(*BATCH, epoch=0)
    assert rw.rho["state_mismatch"] == pytest.approx(0.75 * 1.0 + 0.25 * 1.2)  # target 1.3 clipped to 1.2
    assert rw.rho["spurious_tool_call"] == pytest.approx(0.75 * 2.0 + 0.25 * 1.2)  # base 2.0 clipped too
    assert w[0] == pytest.approx((2 * 1.05 + 1.0) / 3)


def test_dynamic_is_the_default_and_state_round_trips():
    rw = Reweighter()
    assert rw.config.rho == "dynamic"
    rw.weights(*BATCH, epoch=3)
    again = Reweighter()
    again.load_state(rw.state())
    assert again.rho == rw.rho and again.epoch == 3 and again.dynamic.window == rw.dynamic.window


def test_config_refuses_unknown_tags_and_modes():
    with pytest.raises(ValueError, match=r"unknown tag in seal.reweighting.rho_overrides 'spurious'; valid: .*"
                                         r"spurious_tool_call"):
        ReweightConfig(rho_overrides={"spurious": 1.0})
    with pytest.raises(ValueError, match="'fixed' or 'dynamic'"):
        ReweightConfig(rho="adaptive")


def test_registered_estimator_refuses_to_silently_train_plain_grpo():
    import verl  # noqa: F401  (loads the plugin)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn("seal_grpo")
    with pytest.raises(RuntimeError, match="trainer_mode=seal_sync"):
        fn(token_level_rewards=_rewards([1.0, 0.0]), response_mask=torch.ones(2, 5), index=np.array([0, 0]))


def test_weight_metrics_separate_rollouts_with_gradient_from_all():
    weights = np.array([2.0, 0.5, 1.5, 1.0])
    tags = [["spurious_tool_call"], ["instance_mismatch"], ["empty_turn_model_response"], ["pass"]]
    valid = np.array([True, True, True, False])
    grad = np.array([True, False, False, True])
    m = weight_metrics(weights, tags, valid, grad)
    assert m["seal/w_all/n"] == 3 and m["seal/w_all/mean"] == pytest.approx(4 / 3)
    assert m["seal/w_grad/n"] == 1 and m["seal/w_grad/mean"] == 2.0 and m["seal/w_grad/share_above_1"] == 1.0
    assert m["seal/w_all/share_below_1"] == pytest.approx(1 / 3)
    assert m["seal/w_all/tag/instance_mismatch"] == 0.5 and "seal/w_grad/tag/instance_mismatch" not in m
    assert "seal/w_all/tag/pass" not in m  # the only pass rollout is not valid


def test_in_informative_group_marks_the_rollouts_grpo_gives_an_advantage():
    uids = ["a", "a", "b", "b"]
    assert in_informative_group(uids, [1.0, 0.0, 1.0, 1.0], [True] * 4).tolist() == [True, True, False, False]
    assert in_informative_group(uids, [1.0, 0.0, 1.0, 0.0], [True, False, True, True]).tolist() == [
        False, False, True, True]


def test_informative_groups_count_groups_whose_valid_rewards_differ():
    uids = ["a", "a", "b", "b", "c", "c"]
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert informative_groups(uids, rewards) == (2, 3)
    # the only failure of group "c" is an infrastructure error: what is left has no spread
    assert informative_groups(uids, rewards, valid=[True, True, True, True, True, False]) == (1, 3)


# Found by mutation testing (benchmarks/mutation.py advantage): each test below fails on a one-line break that the
# tests above let through.

def test_tags_outside_rho_weigh_the_default_and_join_dynamic_rho():
    """A tag the rho table does not list counts with DEFAULT_RHO (1.0) and still moves under dynamic rho."""
    assert trajectory_weight(["state_mismatch", "spurious_tool_call"], {"spurious_tool_call": 2.0}) == 1.5
    d = DynamicRho(base={}, confidence_count=4)
    assert d.get("state_mismatch") == 1.0
    d.update(*BATCH)
    assert d.get("state_mismatch") == pytest.approx(0.75 * 1.0 + 0.25 * 1.3)  # BATCH's hand computation, base 1
    d.update([["gt_error"] * 3], [0.0])  # an excluded tag targets 1, whatever happened in its rollouts
    assert d.get("gt_error") == pytest.approx(1.0)


def test_every_reweighting_key_reaches_dynamic_rho():
    """rho_overrides, alpha, beta and w_min from ``seal.reweighting`` are the dynamic rho's, not its defaults."""
    rw = Reweighter(ReweightConfig(rho_overrides={"state_mismatch": 1.4}, alpha=0.5, beta=0.5, w_min=0.8,
                                   confidence_count=4))
    rw.weights(*BATCH, epoch=0)
    target = 1.4 * (1 + 0.5 * 0.6 * (1 - 1 / 3) * 0.75)  # 1.61
    assert rw.rho["state_mismatch"] == pytest.approx(0.5 * 1.4 + 0.5 * target)
    assert rw.rho["instance_mismatch"] == pytest.approx(0.5 * 0.6 + 0.5 * 0.8)  # absent: base 0.6 clipped to w_min


def test_invalid_rollouts_keep_w_1_and_stay_out_of_the_window():
    fixed = Reweighter(ReweightConfig(rho="fixed", w_max=1.5))
    assert fixed.weights([["spurious_tool_call"], ["spurious_tool_call"]], valid=[True, False]).tolist() == [1.5, 1.0]
    dynamic = Reweighter(ReweightConfig(confidence_count=4))
    dynamic.weights([*BATCH[0], ["spurious_tool_call"]], [*BATCH[1], 0.0], valid=[True, True, False], epoch=0)
    assert "spurious_tool_call" not in dynamic.dynamic.window.count


def test_a_fixed_rho_trainer_ignores_a_dynamic_checkpoint():
    dynamic = Reweighter()
    dynamic.weights(*BATCH, epoch=0)
    fixed = Reweighter(ReweightConfig(rho="fixed"))
    fixed.load_state(dynamic.state())
    assert fixed.dynamic is None and fixed.rho == FIXED_RHO


@pytest.mark.parametrize("w_min, w_max, ok", [(0.0, 2.0, False), (1.0, 1.0, True), (0.5, 0.9, False)])
def test_weight_bounds_must_bracket_1(w_min, w_max, ok):
    if ok:
        ReweightConfig(w_min=w_min, w_max=w_max)
    else:
        with pytest.raises(ValueError, match="0 < w_min <= 1 <= w_max"):
            ReweightConfig(w_min=w_min, w_max=w_max)


def test_a_group_with_one_valid_sample_does_not_stop_the_others():
    adv, _ = seal_grpo_advantage(_rewards([1.0, 1.0, 0.0]), torch.ones(3, 5), ["solo", "g", "g"], epsilon=0.5)
    std = torch.tensor([1.0, 0.0]).std().item()
    assert adv[:, 0].tolist() == pytest.approx([0.0, 0.5 / (std + 0.5), -0.5 / (std + 0.5)])  # epsilon is added


def test_weight_metrics_count_w_exactly_1_as_neither_above_nor_below():
    m = weight_metrics(np.array([1.0, 2.0, 0.5]), [["pass"]] * 3, np.ones(3, bool), np.ones(3, bool))
    assert m["seal/w_all/share_above_1"] == pytest.approx(1 / 3) and m["seal/w_all/share_below_1"] == pytest.approx(1 / 3)
