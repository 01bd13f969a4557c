"""Diagnosis-guided advantage reweighting (SEAL, policy side).

For trajectory j with labelled turns, p_j(z) is the share of its turns labelled z and

    w_j = clip( sum_z p_j(z) * rho(z), w_min, w_max )        (defaults 0.5, 2.0)

The GRPO advantage becomes A_j' = w_j * A_j. Since w_j > 0 the sign of every advantage, and so the verifier's
ranking inside a group, never changes. Labels that reflect our own faults (``infrastructure_error``) or the
task's / ground truth's (``task_error``) are left out of p_j; a trajectory with no remaining labels keeps
w_j = 1. Trajectories flagged as infrastructure failures are additionally *masked*: they do not enter their
group's mean/std and get advantage 0.

rho is either the paper's fixed utilities (``FIXED_RHO``) or dynamic (``DynamicRho``): per label a target
``rho_base * (1 + alpha * prevalence * (1 - mean reward of trajectories with that label) * confidence)``,
``confidence = min(1, count / 32)``, clipped to [0.5, 2.0], then an EMA with beta 0.25 towards it.
Here *prevalence* is the label's share of the batch's labelled turns and *count* the number of such turns.

verl integration: ``seal_grpo`` is registered with ``@register_adv_est`` so ``algorithm.adv_estimator=seal_grpo``
is a valid verl config. verl 0.9.1 calls registered estimators without per-sample metadata, so that entry
point computes plain GRPO (w = 1). The weights are applied by the trainer (``seal_trainer.trainer``), which
fetches each trajectory's labels from the rollout's ``extra_fields`` and calls
``seal_grpo_advantage(..., weights=w, valid=~infra)``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

FIXED_RHO: dict[str, float] = {
    "spurious_tool_call": 2.0,
    "correct_abstention": 1.8,
    "empty_turn_model_response": 1.5,
    "state_mismatch": 1.0,
    "response_mismatch": 0.9,
    "instance_mismatch": 0.6,
    "pass": 1.0,
}
DEFAULT_RHO = 1.0  # every other label
EXCLUDED_LABELS = frozenset({"infrastructure_error", "task_error"})
W_MIN, W_MAX = 0.5, 2.0


def as_labels(value: Any) -> list[str]:
    """Turn labels from an extra field: a JSON list, a list/array, or None."""
    if value is None:
        return []
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [value]
    return [str(v) for v in list(value)]


def label_shares(labels: Sequence[str], excluded: frozenset[str] = EXCLUDED_LABELS) -> dict[str, float]:
    """p_j(z): the share of the trajectory's (non-excluded) turns with label z."""
    kept = [z for z in labels if z not in excluded]
    if not kept:
        return {}
    counts = Counter(kept)
    return {z: c / len(kept) for z, c in counts.items()}


def trajectory_weight(labels: Sequence[str], rho: Mapping[str, float] | None = None, w_min: float = W_MIN,
                      w_max: float = W_MAX, default_rho: float = DEFAULT_RHO,
                      excluded: frozenset[str] = EXCLUDED_LABELS) -> float:
    """w_j = clip(sum_z p_j(z) rho(z), w_min, w_max); 1.0 without (non-excluded) labels."""
    rho = FIXED_RHO if rho is None else rho
    shares = label_shares(labels, excluded)
    if not shares:
        return 1.0
    raw = sum(p * float(rho.get(z, default_rho)) for z, p in shares.items())
    return float(min(max(raw, w_min), w_max))


@dataclass
class DynamicRho:
    """rho that tracks the batch: EMA towards rho_base * (1 + alpha * prevalence * (1 - reward) * confidence)."""

    base: dict[str, float] = field(default_factory=lambda: dict(FIXED_RHO))
    alpha: float = 1.0
    beta: float = 0.25
    confidence_count: int = 32
    rho_min: float = W_MIN
    rho_max: float = W_MAX
    default_rho: float = DEFAULT_RHO
    current: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if not self.current:
            self.current = dict(self.base)

    def get(self, label: str, default: float | None = None) -> float:
        return self.current.get(label, self.base.get(label, self.default_rho if default is None else default))

    def as_mapping(self) -> dict[str, float]:
        return dict(self.current)

    def update(self, trajectory_labels: Sequence[Sequence[str]], rewards: Sequence[float],
               excluded: frozenset[str] = EXCLUDED_LABELS) -> dict[str, float]:
        """One EMA step from a batch of trajectories (their turn labels and 0/1 rewards)."""
        turn_counts: Counter[str] = Counter()
        reward_sum: defaultdict[str, float] = defaultdict(float)
        traj_count: Counter[str] = Counter()
        for labels, reward in zip(trajectory_labels, rewards):
            kept = [z for z in labels if z not in excluded]
            turn_counts.update(kept)
            for z in set(kept):
                reward_sum[z] += float(reward)
                traj_count[z] += 1
        total = sum(turn_counts.values())
        if total == 0:
            return self.as_mapping()
        for z, count in turn_counts.items():
            prevalence = count / total
            mean_reward = reward_sum[z] / traj_count[z]
            confidence = min(1.0, count / self.confidence_count)
            base = self.base.get(z, self.default_rho)
            target = base * (1.0 + self.alpha * prevalence * (1.0 - mean_reward) * confidence)
            target = min(max(target, self.rho_min), self.rho_max)
            self.current[z] = (1.0 - self.beta) * self.get(z) + self.beta * target
        return self.as_mapping()

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "alpha": self.alpha, "beta": self.beta, "current": self.current,
                "confidence_count": self.confidence_count}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DynamicRho:
        return cls(base=dict(doc.get("base", FIXED_RHO)), alpha=float(doc.get("alpha", 1.0)),
                   beta=float(doc.get("beta", 0.25)), confidence_count=int(doc.get("confidence_count", 32)),
                   current=dict(doc.get("current", {})))


@dataclass
class ReweightConfig:
    enable: bool = True
    rho: str = "fixed"  # "fixed" | "dynamic"
    w_min: float = W_MIN
    w_max: float = W_MAX
    alpha: float = 1.0
    beta: float = 0.25
    rho_overrides: dict[str, float] = field(default_factory=dict)


class Reweighter:
    """Computes w for a batch; keeps the dynamic rho state across steps."""

    def __init__(self, config: ReweightConfig | None = None):
        self.config = config or ReweightConfig()
        base = {**FIXED_RHO, **self.config.rho_overrides}
        self.dynamic = DynamicRho(base=base, alpha=self.config.alpha, beta=self.config.beta) \
            if self.config.rho == "dynamic" else None
        self.fixed = base

    @property
    def rho(self) -> Mapping[str, float]:
        return self.dynamic.as_mapping() if self.dynamic is not None else self.fixed

    def weights(self, trajectory_labels: Sequence[Sequence[str]], rewards: Sequence[float] | None = None,
                valid: Sequence[bool] | None = None) -> np.ndarray:
        """w per trajectory (ones when reweighting is off). Dynamic rho first updates from this batch."""
        n = len(trajectory_labels)
        if not self.config.enable:
            return np.ones(n, dtype=np.float64)
        valid = [True] * n if valid is None else list(valid)
        if self.dynamic is not None and rewards is not None:
            self.dynamic.update([l for l, v in zip(trajectory_labels, valid) if v],
                                [r for r, v in zip(rewards, valid) if v])
        rho = self.rho
        return np.array([trajectory_weight(labels, rho, self.config.w_min, self.config.w_max) if ok else 1.0
                         for labels, ok in zip(trajectory_labels, valid)], dtype=np.float64)

    def state(self) -> dict[str, Any]:
        return {"rho_mode": self.config.rho, "rho": dict(self.rho),
                "dynamic": self.dynamic.to_json() if self.dynamic is not None else None}

    def load_state(self, doc: Mapping[str, Any]) -> None:
        if self.dynamic is not None and doc.get("dynamic"):
            self.dynamic = DynamicRho.from_json(doc["dynamic"])


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


def informative_groups(index: Sequence[Any], rewards: Sequence[float], valid: Sequence[bool] | None = None
                       ) -> tuple[int, int]:
    """(groups whose valid rewards differ, groups): only the former give GRPO a non-zero advantage."""
    groups: dict[Any, set[float]] = defaultdict(set)
    for i, (key, r) in enumerate(zip(index, rewards)):
        if valid is None or bool(valid[i]):
            groups[key].add(float(r))
    return sum(len(v) > 1 for v in groups.values()), len(groups)


def weight_metrics(weights: np.ndarray, valid: np.ndarray | None = None, prefix: str = "seal/w") -> dict[str, float]:
    w = weights if valid is None or not valid.any() else weights[valid]
    if w.size == 0:
        return {}
    return {f"{prefix}/mean": float(w.mean()), f"{prefix}/min": float(w.min()), f"{prefix}/max": float(w.max()),
            f"{prefix}/frac_not_one": float(np.mean(np.abs(w - 1.0) > 1e-9))}


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
    def compute_seal_grpo_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6,
                                    norm_adv_by_std_in_grpo=True, seal_weights=None, seal_valid=None, **kwargs):
        """verl entry point; without the trainer hook (no per-sample weights) this is GRPO with w = 1."""
        if config is not None and hasattr(config, "get"):
            norm_adv_by_std_in_grpo = config.get("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo)
        if index is None:
            index = np.arange(token_level_rewards.shape[0])
        return seal_grpo_advantage(token_level_rewards, response_mask, index, seal_weights, seal_valid, epsilon,
                                   norm_adv_by_std_in_grpo)


__all__ = [
    "DEFAULT_RHO", "DynamicRho", "EXCLUDED_LABELS", "FIXED_RHO", "ReweightConfig", "Reweighter", "as_labels",
    "label_distribution", "label_shares", "seal_grpo_advantage", "trajectory_weight", "weight_metrics",
]
