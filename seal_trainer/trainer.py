"""SEAL's verl trainer: the synchronous V1 PPO trainer with the SEAL advantage step and the closed loop.

Registered as V1 trainer mode ``seal_sync`` (``trainer.v1.trainer_mode=seal_sync``); it behaves like verl's
``sync`` mode (colocated rollout, on-policy) except:

- advantage step (``algorithm.adv_estimator=seal_grpo``): fetches each trajectory's ``extra_fields`` from
  TransferQueue (turn labels, infrastructure flag written by the ``seal_tool_env`` agent loop), computes
  w_j (``seal_trainer.advantage``), masks infrastructure failures out of their GRPO groups, and writes
  w_j * A_j. Other estimators fall through to verl's step unchanged.
- after each step: the closed loop (``seal_trainer.closed_loop``) turns the step's labels into a failure
  profile, evolves the interface and publishes it to every agent-loop worker.
- per step it logs (metrics ``seal/*`` and one JSON line in ``seal.log_path``): failure profile, interface
  state, label distribution, w statistics, infrastructure-failure count; prints a one-line summary.
- validation (eval-mode rows, the original interface): each result is printed as one ``[seal] held-out``
  line and appended to the same JSONL log, so ``seal-train``'s plot needs nothing else.
- checkpoints: ``seal_state.json`` (interface state, closed-loop window, dynamic rho) is saved in each
  ``global_step_N`` folder and restored on resume.

``SealTaskRunner`` is verl's ``TaskRunnerV1`` with the SEAL registrations imported first (``seal-train``
launches it through ``verl.trainer.main_ppo.run_ppo``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from seal_trainer.advantage import (
    Reweighter, as_labels, informative_groups, label_distribution, seal_grpo_advantage, weight_metrics,
)
from seal_trainer.closed_loop import ClosedLoop, interface_summary
from seal_trainer.config import seal_config_from

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("SEAL_LOGGING_LEVEL", "INFO"))

TRAINER_MODE = "seal_sync"
STATE_FILE = "seal_state.json"


def _extra_fields(keys, partition_id) -> list[dict[str, Any]]:
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
    return [dict(e or {}) for e in data.pop("extra_fields").tolist()]


def _labels_and_infra(extras: list[dict[str, Any]]) -> tuple[list[list[str]], np.ndarray]:
    """Each trajectory's turn labels and infrastructure flag, from the agent loop's extra fields."""
    labels = [as_labels(e.get("seal_labels")) for e in extras]
    return labels, np.array([bool(e.get("seal_infrastructure_error", False)) for e in extras], dtype=bool)


class SealPPOTrainer(PPOTrainerSync):
    """verl's sync V1 trainer + SEAL (see module docstring)."""

    # verl's base class branches on ``trainer_mode == "sync"``; this trainer *is* sync, under its own name.
    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self._registered_mode = value

    def __init__(self, config):
        super().__init__(config)
        self._init_seal(config)

    def _init_seal(self, config) -> None:
        """SEAL's state from the ``seal:`` block: switches, reweighter, closed loop, step log (tests call it alone)."""
        self.seal = seal_config_from(config)
        switches = self.seal.resolved()
        self.switches = switches
        self.reweighter = Reweighter(self.seal.reweighting)
        self.closed_loop = ClosedLoop(switches["interface_evolution"], switches["closed_loop_update"],
                                      self.seal.profile_window)
        self._seal_step: dict[str, Any] = {}
        self._seal_pending: dict[str, float] = {}
        log_path = self.seal.log_path or os.path.join(config.trainer.default_local_dir, "seal_steps.jsonl")
        self.seal_log_path = Path(log_path)
        if config.algorithm.adv_estimator == "seal_grpo" and config.algorithm.use_kl_in_reward:
            raise ValueError("algorithm.adv_estimator=seal_grpo does not support use_kl_in_reward=True "
                             "(the paper uses a KL loss, actor.use_kl_loss=True, instead)")

    # ------------------------------------------------------------------ advantage

    def _compute_advantage(self, batch, metrics: dict):
        extras = _extra_fields(batch.keys, batch.partition_id)
        if self.config.algorithm.adv_estimator != "seal_grpo":
            batch = super()._compute_advantage(batch, metrics)
            labels, infra = _labels_and_infra(extras)
            self._record(labels, infra, np.ones(len(labels)), None, extras, metrics)
            return batch
        fields = ["uid", "response_mask", "rm_scores"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        output = self._seal_advantage(data, extras, metrics)
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

    def _seal_advantage(self, data: TensorDict, extras: list[dict[str, Any]], metrics: dict) -> TensorDict:
        """w_j * A_j (GRPO over each group's valid samples) for the batch's ``uid``/``response_mask``/``rm_scores``
        as TransferQueue returns them; the ``advantages``/``returns`` fields to write back."""
        labels, infra = _labels_and_infra(extras)
        response_mask_nested = data["response_mask"]
        proto = DataProto(batch=data.to_padded_tensor())
        uids = list(proto.batch.pop("uid").tolist())
        scores = proto.batch["rm_scores"]
        mask = proto.batch["response_mask"]
        rewards = scores.sum(dim=-1).tolist()
        valid = ~infra
        weights = self.reweighter.weights(labels, rewards, valid)
        adv, returns = seal_grpo_advantage(
            scores, mask, uids, weights=torch.as_tensor(weights), valid=torch.as_tensor(valid),
            norm_adv_by_std_in_grpo=self.config.algorithm.get("norm_adv_by_std_in_grpo", True))
        self._record(labels, infra, weights, rewards, extras, metrics, uids)
        return TensorDict({"advantages": response_to_nested(adv, response_mask_nested),
                           "returns": response_to_nested(returns, response_mask_nested)}, batch_size=len(extras))

    def _record(self, labels, infra, weights, rewards, extras, metrics: dict, uids=None) -> None:
        valid = ~infra
        dist = label_distribution([l for l, ok in zip(labels, valid) if ok])
        profile = self.closed_loop.observe(labels, valid)
        step_metrics: dict[str, float] = {
            "seal/infrastructure_errors": float(infra.sum()),
            "seal/truncated": float(sum(bool(e.get("seal_truncated")) for e in extras)),
            "seal/interface_version": float(self.closed_loop.interface.version),
        }
        if rewards is not None:
            r = np.asarray(rewards, dtype=float)
            step_metrics["seal/reward_mean"] = float(r[valid].mean()) if valid.any() else 0.0
        if rewards is not None and uids is not None:
            informative, groups = informative_groups(uids, rewards, valid)
            step_metrics.update({"seal/informative_groups": float(informative), "seal/groups": float(groups)})
        step_metrics.update(weight_metrics(np.asarray(weights), valid))
        step_metrics.update({f"seal/label_share/{k}": v for k, v in dist.items()})
        metrics.update(step_metrics)
        self._seal_step = {
            "labels": dist, "profile": profile, "w": weight_metrics(np.asarray(weights), valid, prefix="w"),
            "weights": [round(float(w), 4) for w in weights], "infrastructure_errors": int(infra.sum()),
            "reward_mean": step_metrics.get("seal/reward_mean"), "rho": self.reweighter.state()["rho"],
            "n": len(labels), "groups": step_metrics.get("seal/groups"),
            "informative_groups": step_metrics.get("seal/informative_groups"),
        }

    # ------------------------------------------------------------------ closed loop

    def on_train_begin(self):
        super().on_train_begin()
        self._step_started = time.time()

    def on_step_end(self):
        super().on_step_end()
        before = self.closed_loop.interface
        state, changed = self.closed_loop.update(self.global_steps)
        record = {
            "step": self.global_steps, "time": time.time(), "switches": self.switches,
            **self._seal_step,
            "interface_before": before.to_json(), "interface": state.to_json(), "interface_changed": changed,
        }
        self._seal_pending = {"seal/interface_changed": float(changed),
                              "seal/interface_version_next": float(state.version)}
        self._log(record)
        if self.seal.print_steps:
            s = self._seal_step
            labels = " ".join(f"{k}={v:.2f}" for k, v in (s.get("labels") or {}).items()) or "-"
            w = s.get("w") or {}
            now = time.time()
            took = f" ({now - self._step_started:.0f} s)" if getattr(self, "_step_started", None) else ""
            self._step_started = now
            reward = s.get("reward_mean")
            print(f"[seal] step {self.global_steps}/{self.total_training_steps}{took}: reward "
                  f"{reward if reward is None else f'{reward:.3f}'} | informative groups "
                  f"{s.get('informative_groups') or 0:.0f}/{s.get('groups') or 0:.0f} | w mean {w.get('w/mean', 1):.2f} "
                  f"[{w.get('w/min', 1):.2f}, {w.get('w/max', 1):.2f}] | infra {s.get('infrastructure_errors', 0)} | "
                  f"interface {interface_summary(before)} -> {interface_summary(state)} | labels {labels}", flush=True)

    def _log(self, record: dict[str, Any]) -> None:
        try:
            self.seal_log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.seal_log_path.open("a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        except OSError:
            logger.warning("could not write %s", self.seal_log_path, exc_info=True)

    def _validate(self) -> dict[str, float]:
        metrics = super()._validate()
        success = [float(v) for k, v in metrics.items() if k.startswith("val-core/") and "/reward/mean@" in k]
        value = float(np.mean(success)) if success else float("nan")
        self._log({"step": self.global_steps, "time": time.time(), "validation": {
            "success": value, "tasks": len(self.val_dataset),
            "metrics": {k: float(v) for k, v in metrics.items() if k.startswith("val-core/")}}})
        per_source = {"/".join(k.split("/")[1:-2]): v for k, v in metrics.items()
                      if k.startswith("val-core/") and "/reward/mean@" in k}
        sources = f" ({', '.join(f'{s} {v:.3f}' for s, v in per_source.items())})" if len(per_source) > 1 else ""
        print(f"[seal] held-out success after {self.global_steps} step(s): {value:.3f}{sources} on "
              f"{len(self.val_dataset)} tasks (eval mode, original interface, greedy)", flush=True)
        return metrics

    def _consume_sync_metrics(self) -> dict:
        metrics = super()._consume_sync_metrics()
        metrics.update(self._seal_pending)
        self._seal_pending = {}
        return metrics

    # ------------------------------------------------------------------ checkpoints

    def _seal_state(self) -> dict[str, Any]:
        return {"reweighter": self.reweighter.state(), "switches": self.switches, "step": self.global_steps}

    def _save_checkpoint(self):
        super()._save_checkpoint()
        folder = Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}"
        folder.mkdir(parents=True, exist_ok=True)
        self.closed_loop.save(folder / STATE_FILE, self._seal_state())

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps <= 0:
            return
        folder = Path(self.config.trainer.default_local_dir)
        if self.config.trainer.resume_mode == "resume_path":
            folder = Path(self.config.trainer.resume_from_path).parent
        path = folder / f"global_step_{self.global_steps}" / STATE_FILE
        if path.exists():
            doc = self.closed_loop.load(path)
            self.reweighter.load_state(doc.get("reweighter", {}))
            logger.info("restored SEAL state from %s (interface %s)", path, interface_summary(self.closed_loop.interface))


if TRAINER_MODE not in TRAINER_REGISTRY:
    register_trainer(TRAINER_MODE)(SealPPOTrainer)


@ray.remote
class SealTaskRunner(TaskRunnerV1.__ray_actor_class__ if hasattr(TaskRunnerV1, "__ray_actor_class__") else object):
    """verl's V1 task runner, with SEAL's registrations loaded in its process."""

    def run(self, config):
        import seal_trainer.plugin  # noqa: F401  (registers agent loop, estimator, trainer, cpu shims)

        return super().run(config)


__all__ = ["SealPPOTrainer", "SealTaskRunner", "TRAINER_MODE"]
