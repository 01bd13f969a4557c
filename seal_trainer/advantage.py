"""Diagnosis-guided advantage reweighting (SEAL, policy side), as the paper's released code computes it.

For trajectory j with tagged turns, p_j(z) is the share of its turns tagged z (the paper's tags,
``seal_envs.diagnosis.Tag``) and

    w_j = clip( sum_z p_j(z) * rho(z), w_min, w_max )        (defaults 0.5, 2.0)

The GRPO advantage becomes A_j' = w_j * A_j. Since w_j > 0 the sign of every advantage, and so the verifier's
ranking inside a group, never changes. Tags that say nothing about the policy (``gt_error``, ``checker_error``,
``infrastructure_error``) are left out of p_j; a trajectory with no remaining tags keeps w_j = 1. Trajectories
flagged as infrastructure failures are additionally *masked*: they do not enter their group's mean/std and get
advantage 0.

rho is the paper's fixed utilities (``FIXED_RHO``) or dynamic (``DynamicRho``, the default of the SEAL arm, as in
the reference's full configuration): at each update every known tag moves by an EMA (beta 0.25) towards
``rho_base * (1 + alpha * prevalence * (1 - mean reward) * min(1, count / 32))`` clipped to [w_min, w_max], with
statistics over the current epoch's rollouts: *count* is the number of turns with the tag, *prevalence* its share
of all turns, *mean reward* the mean reward of the rollouts of those turns (each turn counts once). ``pass``
targets its base; a tag absent from the window has prevalence 0 and decays back to its base.

verl integration: ``seal_grpo`` is registered with ``@register_adv_est`` so ``algorithm.adv_estimator=seal_grpo``
is a valid verl config. verl 0.9.1 calls registered estimators without per-sample metadata, so the weights are
applied by SEAL's trainer (``seal_trainer.trainer``, ``trainer.v1.trainer_mode=seal_sync``), which reads each
trajectory's tags from the rollout's ``extra_fields``; the registered entry point itself refuses to run.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from seal_envs.diagnosis import EXCLUDED_TAGS, Tag, check_names

FIXED_RHO: dict[str, float] = {
    "spurious_tool_call": 2.0,
    "correct_abstention": 1.8,
    "empty_turn_model_response": 1.5,
    "state_mismatch": 1.0,
    "response_mismatch": 0.9,
    "instance_mismatch": 0.6,
    "pass": 1.0,
}
DEFAULT_RHO = 1.0  # every other tag
EXCLUDED = frozenset(t.value for t in EXCLUDED_TAGS)
W_MIN, W_MAX = 0.5, 2.0


def as_labels(value: Any) -> list[str]:
    """Turn labels or tags from an extra field: a JSON list, a list/array, or None."""
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [value]
    return [str(v) for v in list(value)]


def label_shares(tags: Sequence[str], excluded: frozenset[str] = EXCLUDED) -> dict[str, float]:
    """p_j(z): the share of the trajectory's (non-excluded) turns with tag z."""
    kept = [z for z in tags if z not in excluded]
    if not kept:
        return {}
    counts = Counter(kept)
    return {z: c / len(kept) for z, c in counts.items()}


def trajectory_weight(tags: Sequence[str], rho: Mapping[str, float] | None = None, w_min: float = W_MIN,
                      w_max: float = W_MAX, default_rho: float = DEFAULT_RHO,
                      excluded: frozenset[str] = EXCLUDED) -> float:
    """w_j = clip(sum_z p_j(z) rho(z), w_min, w_max); 1.0 without (non-excluded) tags."""
    rho = FIXED_RHO if rho is None else rho
    shares = label_shares(tags, excluded)
    if not shares:
        return 1.0
    raw = sum(p * float(rho.get(z, default_rho)) for z, p in shares.items())
    return float(min(max(raw, w_min), w_max))


@dataclass
class TagWindow:
    """Per tag over the window: turns seen and the summed reward of their rollouts (one entry per turn)."""

    count: Counter[str] = field(default_factory=Counter)
    reward_sum: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def observe(self, trajectory_tags: Iterable[Sequence[str]], rewards: Iterable[float]) -> None:
        for tags, reward in zip(trajectory_tags, rewards):
            for z in tags:
                self.count[z] += 1
                self.reward_sum[z] += float(reward)

    def reward_mean(self, tag: str) -> float:
        return self.reward_sum[tag] / self.count[tag] if self.count[tag] else 0.0


@dataclass
class DynamicRho:
    """rho that tracks the epoch: EMA towards rho_base * (1 + alpha * prevalence * (1 - reward) * confidence)."""

    base: dict[str, float] = field(default_factory=lambda: dict(FIXED_RHO))
    alpha: float = 1.0
    beta: float = 0.25
    confidence_count: int = 32
    rho_min: float = W_MIN
    rho_max: float = W_MAX
    default_rho: float = DEFAULT_RHO
    current: dict[str, float] = field(default_factory=dict)
    window: TagWindow = field(default_factory=TagWindow)

    def get(self, tag: str) -> float:
        return self.current.get(tag, self.base.get(tag, self.default_rho))

    def as_mapping(self) -> dict[str, float]:
        return {**self.base, **self.current}

    def reset_window(self) -> None:
        """A new epoch: statistics start again (the EMA state is kept)."""
        self.window = TagWindow()

    def update(self, trajectory_tags: Sequence[Sequence[str]], rewards: Sequence[float]) -> dict[str, float]:
        """Add a batch to the window, then move every known tag one EMA step towards its target."""
        self.window.observe(trajectory_tags, rewards)
        total = sum(c for z, c in self.window.count.items() if z not in EXCLUDED)
        if total == 0:
            return self.as_mapping()
        for z in set(self.base) | set(self.window.count) | set(self.current):
            base = self.base.get(z, self.default_rho)
            if z in EXCLUDED:
                target = 1.0
            elif z == Tag.PASS.value:
                target = base
            else:
                count = self.window.count.get(z, 0)
                confidence = min(1.0, count / self.confidence_count)
                stagnation = 1.0 - self.window.reward_mean(z)
                target = base * (1.0 + self.alpha * (count / total) * stagnation * confidence)
            target = min(max(target, self.rho_min), self.rho_max)
            self.current[z] = (1.0 - self.beta) * self.get(z) + self.beta * target
        return self.as_mapping()

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "alpha": self.alpha, "beta": self.beta, "current": self.current,
                "confidence_count": self.confidence_count, "rho_min": self.rho_min, "rho_max": self.rho_max,
                "window": {"count": dict(self.window.count), "reward_sum": dict(self.window.reward_sum)}}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DynamicRho:
        window = doc.get("window") or {}
        return cls(base=dict(doc.get("base", FIXED_RHO)), alpha=float(doc.get("alpha", 1.0)),
                   beta=float(doc.get("beta", 0.25)), confidence_count=int(doc.get("confidence_count", 32)),
                   rho_min=float(doc.get("rho_min", W_MIN)), rho_max=float(doc.get("rho_max", W_MAX)),
                   current=dict(doc.get("current", {})),
                   window=TagWindow(Counter(window.get("count", {})),
                                    defaultdict(float, window.get("reward_sum", {}))))


@dataclass
class ReweightConfig:
    """``seal.reweighting``: ``rho`` is ``dynamic`` (the paper's full SEAL) or ``fixed`` (its ablation)."""

    enable: bool = True
    rho: str = "dynamic"
    w_min: float = W_MIN
    w_max: float = W_MAX
    alpha: float = 1.0
    beta: float = 0.25
    confidence_count: int = 32
    rho_overrides: dict[str, float] = field(default_factory=dict)  # tag -> base rho

    def __post_init__(self):
        if self.rho not in ("fixed", "dynamic"):
            raise ValueError(f"seal.reweighting.rho must be 'fixed' or 'dynamic', not {self.rho!r}")
        if not 0 < self.w_min <= 1.0 <= self.w_max:
            raise ValueError(f"seal.reweighting needs 0 < w_min <= 1 <= w_max, not w_min={self.w_min}, "
                             f"w_max={self.w_max}")
        check_names(self.rho_overrides, (Tag,), "tag in seal.reweighting.rho_overrides")


class Reweighter:
    """Computes w for a batch; keeps the dynamic rho state (and its epoch window) across steps."""

    def __init__(self, config: ReweightConfig | None = None):
        self.config = config or ReweightConfig()
        base = {**FIXED_RHO, **self.config.rho_overrides}
        self.dynamic = DynamicRho(base=base, alpha=self.config.alpha, beta=self.config.beta,
                                  confidence_count=self.config.confidence_count, rho_min=self.config.w_min,
                                  rho_max=self.config.w_max) if self.config.rho == "dynamic" else None
        self.fixed = base
        self.epoch: int | None = None

    @property
    def rho(self) -> Mapping[str, float]:
        return self.dynamic.as_mapping() if self.dynamic is not None else self.fixed

    def weights(self, trajectory_tags: Sequence[Sequence[str]], rewards: Sequence[float] | None = None,
                valid: Sequence[bool] | None = None, epoch: int | None = None) -> np.ndarray:
        """w per trajectory (ones when reweighting is off). Dynamic rho first adds this batch to its window (a new
        ``epoch`` starts a new window) and updates, as the reference does before it scales advantages."""
        n = len(trajectory_tags)
        if not self.config.enable:
            return np.ones(n, dtype=np.float64)
        valid = [True] * n if valid is None else list(valid)
        if self.dynamic is not None and rewards is not None:
            if epoch is not None and epoch != self.epoch:
                if self.epoch is not None:
                    self.dynamic.reset_window()
                self.epoch = epoch
            self.dynamic.update([t for t, v in zip(trajectory_tags, valid) if v],
                                [r for r, v in zip(rewards, valid) if v])
        rho = self.rho
        return np.array([trajectory_weight(tags, rho, self.config.w_min, self.config.w_max) if ok else 1.0
                         for tags, ok in zip(trajectory_tags, valid)], dtype=np.float64)

    def state(self) -> dict[str, Any]:
        return {"rho_mode": self.config.rho, "rho": dict(self.rho), "epoch": self.epoch,
                "dynamic": self.dynamic.to_json() if self.dynamic is not None else None}

    def load_state(self, doc: Mapping[str, Any]) -> None:
        if self.dynamic is not None and doc.get("dynamic"):
            self.dynamic = DynamicRho.from_json(doc["dynamic"])
            self.epoch = doc.get("epoch")


def seal_grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any],
                        weights: Sequence[float] | torch.Tensor | None = None,
                        valid: Sequence[bool] | torch.Tensor | None = None, epsilon: float = 1e-6,
                        norm_adv_by_std_in_grpo: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantages over the valid samples of each group, times w.

    Invalid samples (infrastructure failures) neither enter their group's mean/std nor get an advantage.
    A group with a single valid sample gets advantage 0 (no baseline to compare against).
    """
    scores = token_level_rewards.sum(dim=-1).to(torch.float64)
    n = scores.shape[0]
    valid_t = torch.ones(n, dtype=torch.bool) if valid is None else torch.as_tensor(valid, dtype=torch.bool)
    w = torch.ones(n, dtype=torch.float64) if weights is None else torch.as_tensor(weights, dtype=torch.float64)
    if torch.any(w <= 0):
        raise ValueError("advantage weights must be positive (they may scale, never flip, an advantage)")
    groups: dict[Any, list[int]] = defaultdict(list)
    for i, key in enumerate(list(index)):
        if bool(valid_t[i]):
            groups[key].append(i)
    adv = torch.zeros(n, dtype=torch.float64)
    for members in groups.values():
        if len(members) < 2:
            continue
        group = scores[members]
        centred = group - group.mean()
        if norm_adv_by_std_in_grpo:
            centred = centred / (group.std() + epsilon)
        adv[members] = centred
    adv = adv * w * valid_t.to(torch.float64)
    out = adv.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return out, out


def _valid_reward_sets(index: Sequence[Any], rewards: Sequence[float], valid: Sequence[bool] | None
                       ) -> dict[Any, set[float]]:
    """Per GRPO group (``index``), the distinct rewards of its valid rollouts."""
    groups: dict[Any, set[float]] = defaultdict(set)
    for i, (key, r) in enumerate(zip(index, rewards)):
        if valid is None or bool(valid[i]):
            groups[key].add(float(r))
    return groups


def informative_groups(index: Sequence[Any], rewards: Sequence[float], valid: Sequence[bool] | None = None
                       ) -> tuple[int, int]:
    """(groups whose valid rewards differ, groups): only the former give GRPO a non-zero advantage."""
    groups = _valid_reward_sets(index, rewards, valid)
    return sum(len(v) > 1 for v in groups.values()), len(groups)


def in_informative_group(index: Sequence[Any], rewards: Sequence[float], valid: Sequence[bool]) -> np.ndarray:
    """Per rollout: valid and in a group whose valid rewards differ (with 0/1 rewards: a non-zero GRPO advantage)."""
    groups = _valid_reward_sets(index, rewards, valid)
    return np.array([bool(ok) and len(groups[key]) > 1 for key, ok in zip(index, valid)], dtype=bool)


def mean_weight_by_name(weights: Sequence[float], names: Sequence[Sequence[str]], rows: Iterable[int]
                        ) -> dict[str, float]:
    """Per label or tag among the rollouts ``rows``: the mean w of those that have it (``names[j]``: rollout j's)."""
    picked: defaultdict[str, list[float]] = defaultdict(list)
    for j in rows:
        for name in set(names[j]):
            picked[name].append(float(weights[j]))
    return {name: float(np.mean(ws)) for name, ws in sorted(picked.items())}


def weight_metrics(weights: np.ndarray, trajectory_tags: Sequence[Sequence[str]], valid: np.ndarray,
                   carries_gradient: np.ndarray, prefix: str = "seal/w") -> dict[str, float]:
    """w statistics over two sets, never mixed: ``all`` (the valid rollouts) and ``grad`` (those whose advantage is
    non-zero, the only ones the update sees): n, mean, min, max, share above and below 1, and per tag the mean w
    of the rollouts that have it."""
    out: dict[str, float] = {}
    for name, mask in (("all", valid), ("grad", valid & carries_gradient)):
        w = weights[mask]
        out[f"{prefix}_{name}/n"] = float(w.size)
        if w.size == 0:
            continue
        out.update({f"{prefix}_{name}/mean": float(w.mean()), f"{prefix}_{name}/min": float(w.min()),
                    f"{prefix}_{name}/max": float(w.max()),
                    f"{prefix}_{name}/share_above_1": float(np.mean(w > 1.0 + 1e-9)),
                    f"{prefix}_{name}/share_below_1": float(np.mean(w < 1.0 - 1e-9))})
        for tag, mean in mean_weight_by_name(weights, trajectory_tags, np.flatnonzero(mask)).items():
            out[f"{prefix}_{name}/tag/{tag}"] = mean
    return out


def label_distribution(trajectory_labels: Iterable[Sequence[str]]) -> dict[str, float]:
    """Share of each label among all turns of the batch."""
    counts: Counter[str] = Counter()
    for labels in trajectory_labels:
        counts.update(labels)
    total = sum(counts.values())
    return {z: c / total for z, c in sorted(counts.items())} if total else {}


def _register() -> None:
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    if "seal_grpo" in ADV_ESTIMATOR_REGISTRY:
        return

    @register_adv_est("seal_grpo")
    def compute_seal_grpo_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        """verl calls registered estimators without the rollouts' tags, so SEAL's weights cannot be applied here:
        refuse rather than silently train plain GRPO."""
        raise RuntimeError(
            "algorithm.adv_estimator=seal_grpo is computed by SEAL's trainer, which reads each rollout's turn tags: "
            "set trainer.v1.trainer_mode=seal_sync and the seal_tool_env agent loop (seal-train does both), or use "
            "algorithm.adv_estimator=grpo for plain GRPO")


__all__ = [
    "DEFAULT_RHO", "DynamicRho", "EXCLUDED", "FIXED_RHO", "ReweightConfig", "Reweighter", "TagWindow", "as_labels",
    "in_informative_group", "informative_groups", "label_distribution", "mean_weight_by_name", "label_shares", "seal_grpo_advantage", "trajectory_weight",
    "weight_metrics",
]
