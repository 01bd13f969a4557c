"""SEAL's verl trainer: the synchronous V1 PPO trainer with the SEAL advantage step and the closed loop.

Registered as V1 trainer mode ``seal_sync`` (``trainer.v1.trainer_mode=seal_sync``); it behaves like verl's
``sync`` mode (colocated rollout, on-policy) except:

- advantage step (``algorithm.adv_estimator=seal_grpo``): fetches each trajectory's ``extra_fields`` from
  TransferQueue (turn labels and tags, infrastructure flag written by the ``seal_tool_env`` agent loop), computes
  w_j from the tags (``seal_trainer.advantage``; dynamic rho over the epoch's rollouts), masks infrastructure
  failures out of their GRPO groups, and writes w_j * A_j. A batch without tags is refused, never silently plain
  GRPO. Other estimators fall through to verl's step unchanged.
- dynamic sampling (verl's DAPO, ``algorithm.filter_groups``) works unchanged, bounded by
  ``filter_groups.max_num_gen_batches`` refills per step (verl's V1 buffer ignores it, and would refill forever
  for a policy that passes or fails every task); ``seal/refilled_prompts`` counts them.
- before the first step the starting interface (schema cues, as the reference's main configuration) is published;
  after each step the closed loop (``seal_trainer.closed_loop``) adds every training rollout's labels, tags and
  reward (drained from the board the agent loop posts them to: also the groups dynamic sampling dropped) to
  its window's failure profile, evolves the interface and publishes it to every agent-loop worker.
- per step it logs (metrics ``seal/*`` and one JSON line in ``seal.log_path``): failure profile, interface
  state, label and tag distribution, w statistics over the rollouts that carry gradient and over all of them
  (never mixed), infrastructure-failure count; prints a one-line summary.
- validation (eval-mode rows, the original interface): each result is printed as one ``[seal] held-out``
  line and appended to the same JSONL log, so ``seal-train``'s plot needs nothing else.
- checkpoints: ``seal_state.json`` (interface state, closed-loop window, dynamic rho) is saved in each
  ``global_step_N`` folder and restored on resume.

``seal_trainer.task_runner.SealTaskRunner`` launches it (``seal-train``, through ``verl.trainer.main_ppo.run_ppo``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from seal_trainer.advantage import (
    Reweighter, as_labels, in_informative_group, informative_groups, label_distribution, seal_grpo_advantage,
    weight_metrics,
)
from seal_trainer.closed_loop import ClosedLoop, interface_summary
from seal_trainer.config import seal_config_from
from seal_trainer.shared_prefix import PREFIX_FLAG, SKIP_FLAG

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("SEAL_LOGGING_LEVEL", "INFO"))

TRAINER_MODE = "seal_sync"
WORKER_CHECK_S = 10.0  # seconds between liveness checks of the agent-loop workers while the step waits for episodes
STATE_FILE = "seal_state.json"


def _extra_fields(keys, partition_id) -> list[dict[str, Any]]:
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
    return [dict(e or {}) for e in data.pop("extra_fields").tolist()]


@dataclass
class Rollouts:
    """What the SEAL steps read from each rollout's ``extra_fields`` (written by the ``seal_tool_env`` loop)."""

    labels: list[list[str]]
    tags: list[list[str]]
    infra: np.ndarray
    truncated: list[bool]
    tagged: int  # rollouts whose extra fields carry turn tags at all

    @classmethod
    def from_extras(cls, extras: list[dict[str, Any]]) -> Rollouts:
        return cls(labels=[as_labels(e.get("seal_labels")) for e in extras],
                   tags=[as_labels(e.get("seal_tags")) for e in extras],
                   infra=np.array([bool(e.get("seal_infrastructure_error", False)) for e in extras], dtype=bool),
                   truncated=[bool(e.get("seal_truncated")) for e in extras],
                   tagged=sum("seal_tags" in e for e in extras))

    def require_tags(self) -> None:
        """seal_grpo without the SEAL agent loop would silently be plain GRPO: refuse it, and say so where only
        part of the batch carries tags (those rollouts keep w = 1)."""
        if self.tagged == 0:
            raise ValueError("algorithm.adv_estimator=seal_grpo needs turn tags from the seal_tool_env agent loop, "
                             "and no rollout of this batch has them: give the dataset rows agent_name=seal_tool_env "
                             "(seal-train's data.*_files=auto does), or set algorithm.adv_estimator=grpo")
        if self.tagged < len(self.labels):
            logger.warning("%d of %d rollouts carry no SEAL turn tags (another agent loop): they keep w = 1",
                           len(self.labels) - self.tagged, len(self.labels))


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
                                      self.seal.profile_window, self.seal.interface)
        self._seal_step: dict[str, Any] = {}
        self._seal_pending: dict[str, float] = {}
        self._refilled_prompts = 0  # DAPO refills of this step (see _add_prompts_to_generate)
        self._filter_metric: str | None = None  # the DAPO metric while filtering is suspended for a step
        log_path = self.seal.log_path or os.path.join(config.trainer.default_local_dir, "seal_steps.jsonl")
        self.seal_log_path = Path(log_path)
        if config.algorithm.adv_estimator == "seal_grpo" and config.algorithm.use_kl_in_reward:
            raise ValueError("algorithm.adv_estimator=seal_grpo does not support use_kl_in_reward=True "
                             "(the paper uses a KL loss, actor.use_kl_loss=True, instead)")

    # ------------------------------------------------------------------ advantage

    def _epoch(self) -> int:
        """The epoch of the step being trained (verl counts steps from 1): dynamic rho's and the profile's window."""
        step = getattr(self, "global_steps", 1)
        return max(step - 1, 0) // max(getattr(self, "steps_per_epoch", 0) or 1, 1)

    def _compute_advantage(self, batch, metrics: dict):
        extras = _extra_fields(batch.keys, batch.partition_id)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=["uid", "response_mask", "rm_scores"])
        if self.config.algorithm.adv_estimator != "seal_grpo":
            batch = super()._compute_advantage(batch, metrics)
            rollouts = Rollouts.from_extras(extras)
            proto = DataProto(batch=data.to_padded_tensor())
            uids = list(proto.batch.pop("uid").tolist())
            rewards = proto.batch["rm_scores"].sum(dim=-1).tolist()
            carries = in_informative_group(uids, rewards, ~rollouts.infra)
            self._record(rollouts, np.ones(len(uids)), rewards, carries, uids, metrics)
            return batch
        output = self._seal_advantage(data, extras, metrics)
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

    def _seal_advantage(self, data: TensorDict, extras: list[dict[str, Any]], metrics: dict) -> TensorDict:
        """w_j * A_j (GRPO over each group's valid samples) for the batch's ``uid``/``response_mask``/``rm_scores``
        as TransferQueue returns them and the rollouts' extra fields; the ``advantages``/``returns`` to write back."""
        rollouts = Rollouts.from_extras(extras)
        rollouts.require_tags()
        response_mask_nested = data["response_mask"]
        proto = DataProto(batch=data.to_padded_tensor())
        uids = list(proto.batch.pop("uid").tolist())
        scores, mask = proto.batch["rm_scores"], proto.batch["response_mask"]
        rewards = scores.sum(dim=-1).tolist()
        valid = ~rollouts.infra
        weights = self.reweighter.weights(rollouts.tags, rewards, valid, epoch=self._epoch())
        adv, returns = seal_grpo_advantage(
            scores, mask, uids, weights=torch.as_tensor(weights), valid=torch.as_tensor(valid),
            norm_adv_by_std_in_grpo=self.config.algorithm.get("norm_adv_by_std_in_grpo", True))
        self._record(rollouts, weights, rewards, (adv != 0).any(dim=-1).numpy(), uids, metrics)
        return TensorDict({"advantages": response_to_nested(adv, response_mask_nested),
                           "returns": response_to_nested(returns, response_mask_nested)}, batch_size=len(uids))

    # ------------------------------------------------------------------ update

    def _update_actor(self, batch, metrics: dict):
        """verl's update, telling SEAL's CPU engine (``seal_trainer.shared_prefix``) what it may leave out: a group's
        repeated prompt (``actor.use_prefix_grouper``) and rows whose gradient is exactly zero (zero advantage under
        the vanilla policy loss, with no KL loss and no entropy term). verl's GPU engines ignore both keys."""
        actor = self.config.actor_rollout_ref.actor
        exact_zero = (actor.policy_loss.get("loss_mode", "vanilla") == "vanilla" and not actor.use_kl_loss
                      and actor.entropy_coeff == 0 and not actor.get("calculate_entropy", False))
        if exact_zero and self.seal.skip_gradientless_updates and self._seal_step.get("gradient_rows") == 0:
            # no row has a gradient: Adam would still step on its momentum (seal.skip_gradientless_updates)
            metrics["seal/update_skipped"] = 1.0
            return batch
        metrics["seal/update_skipped"] = 0.0
        batch.extra_info.update({PREFIX_FLAG: bool(actor.get(PREFIX_FLAG, False)), SKIP_FLAG: exact_zero})
        return super()._update_actor(batch, metrics)

    def _record(self, rollouts: Rollouts, weights, rewards, carries_gradient, uids, metrics: dict) -> None:
        valid = ~rollouts.infra
        kept = [l for l, ok in zip(rollouts.labels, valid) if ok]
        dist = label_distribution(kept)
        tag_dist = label_distribution([t for t, ok in zip(rollouts.tags, valid) if ok])
        posted = self.closed_loop.observe_posted(epoch=self._epoch())  # every rollout, dropped groups too
        if posted is None:
            profile, profiled = self.closed_loop.observe(rollouts.labels, rollouts.tags, rewards, valid,
                                                         epoch=self._epoch()), len(rollouts.labels)
        else:
            profile, profiled = posted
        r = np.asarray(rewards, dtype=float)
        informative, groups = informative_groups(uids, rewards, valid)
        step_metrics: dict[str, float] = {
            "seal/infrastructure_errors": float(rollouts.infra.sum()),
            "seal/truncated": float(sum(rollouts.truncated)),
            "seal/interface_version": float(self.closed_loop.interface.version),
            "seal/reward_mean": float(r[valid].mean()) if valid.any() else 0.0,
            "seal/informative_groups": float(informative), "seal/groups": float(groups),
            "seal/profiled_rollouts": float(profiled),
        }
        w_stats = weight_metrics(np.asarray(weights), rollouts.tags, valid, np.asarray(carries_gradient, dtype=bool))
        step_metrics.update(w_stats)
        step_metrics.update({f"seal/label_share/{k}": v for k, v in dist.items()})
        step_metrics.update({f"seal/tag_share/{k}": v for k, v in tag_dist.items()})
        metrics.update(step_metrics)
        self._seal_step = {
            "labels": dist, "tags": tag_dist, "profile": profile.to_json(),
            "w": {k.removeprefix("seal/"): v for k, v in w_stats.items()},
            "weights": [round(float(w), 4) for w in weights], "infrastructure_errors": int(rollouts.infra.sum()),
            "reward_mean": step_metrics["seal/reward_mean"], "rho": self.reweighter.state()["rho"],
            "n": len(rollouts.labels), "groups": groups, "informative_groups": informative,
            "profiled_rollouts": profiled,
            "gradient_rows": int(np.asarray(carries_gradient, dtype=bool)[valid].sum()),  # rows with non-zero advantage
        }

    # ------------------------------------------------------------------ dynamic sampling

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        """verl's DAPO refill (``algorithm.filter_groups``), bounded: the V1 replay buffer refills without limit, so
        a policy that passes or fails every task would generate forever. Past ``max_num_gen_batches`` x
        ``data.train_batch_size`` refilled prompts in a step (0: no limit), the step stops filtering: this refill
        and the groups still running are kept whatever their rewards, and filtering resumes at the next step."""
        self._refilled_prompts += num_prompts
        filter_groups = self.config.algorithm.get("filter_groups", None) or {}
        cap = int(filter_groups.get("max_num_gen_batches", 0) or 0) * int(self.config.data.train_batch_size)
        buffer = getattr(self, "replay_buffer", None)
        if cap > 0 and self._refilled_prompts > cap and buffer is not None and buffer.filter_groups_metric:
            logger.warning("step %d: dynamic sampling refilled %d prompts (algorithm.filter_groups.max_num_gen_batches"
                           "=%s); the step takes the next groups whatever their rewards", self.global_steps,
                           self._refilled_prompts - num_prompts, filter_groups.get("max_num_gen_batches"))
            self._filter_metric, buffer.filter_groups_metric = buffer.filter_groups_metric, None
        return super()._add_prompts_to_generate(num_prompts)

    # ------------------------------------------------------------------ lost workers

    def _build_replay_buffer(self):
        """verl's replay buffer, whose poll for finished episodes also checks that the agent-loop workers live."""
        buffer = super()._build_replay_buffer()
        poll = buffer._wait_for_next_poll

        def poll_while_workers_live(partition_id: str, last_debug_time: float) -> float:
            self._check_agent_loop_workers()
            return poll(partition_id, last_debug_time)

        buffer._wait_for_next_poll = poll_while_workers_live
        return buffer

    def _check_agent_loop_workers(self) -> None:
        """Fail the step when an agent-loop worker has died (its node lost): verl hands a worker its episodes
        without waiting and then polls the replay buffer for their results, so a dead worker's episodes never
        arrive and the step would wait for ever. At most every ``WORKER_CHECK_S``; a slow worker is not dead."""
        import ray

        now = time.monotonic()
        if now - getattr(self, "_workers_checked", 0.0) < WORKER_CHECK_S:
            return
        self._workers_checked = now
        workers = getattr(getattr(self, "agent_loop_manager", None), "agent_loop_workers", None) or []
        refs = [worker.__ray_ready__.remote() for worker in workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=WORKER_CHECK_S)
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:  # died, or unreachable (never restarted: as good as dead)
                raise RuntimeError(f"step {self.global_steps}: an agent-loop worker died or cannot be reached (its "
                                   "node lost?), so its episodes will never arrive; the step fails instead of waiting "
                                   f"for them ({exc})") from exc

    # ------------------------------------------------------------------ closed loop

    def on_train_begin(self):
        super().on_train_begin()
        self.closed_loop.start()  # the starting (or restored) interface reaches the envs before the first step
        self._step_started = time.time()

    def on_step_end(self):
        super().on_step_end()
        self._seal_pending["seal/refilled_prompts"] = float(self._refilled_prompts)
        self._refilled_prompts = 0
        if self._filter_metric:  # filtering was suspended for the rest of this step
            self.replay_buffer.filter_groups_metric, self._filter_metric = self._filter_metric, None
        before = self.closed_loop.interface
        state, changed = self.closed_loop.update(self.global_steps)
        record = {
            "step": self.global_steps, "time": time.time(), "switches": self.switches,
            **self._seal_step,
            "interface_before": before.to_json(), "interface": state.to_json(), "interface_changed": changed,
        }
        self._seal_pending.update({"seal/interface_changed": float(changed),
                                   "seal/interface_version_next": float(state.version)})
        self._log(record)
        if self.seal.print_steps:
            s = self._seal_step
            labels = " ".join(f"{k}={v:.2f}" for k, v in (s.get("labels") or {}).items()) or "-"
            w = s.get("w") or {}
            grad = (f"{w['w_grad/mean']:.2f} over the {w['w_grad/n']:.0f} with gradient" if "w_grad/mean" in w
                    else "none with gradient")
            now = time.time()
            took = f" ({now - self._step_started:.0f} s)" if getattr(self, "_step_started", None) else ""
            self._step_started = now
            reward = s.get("reward_mean")
            print(f"[seal] step {self.global_steps}/{self.total_training_steps}{took}: reward "
                  f"{reward if reward is None else f'{reward:.3f}'} | informative groups "
                  f"{s.get('informative_groups') or 0:.0f}/{s.get('groups') or 0:.0f} | w {grad}, "
                  f"{w.get('w_all/mean', 1):.2f} over all {w.get('w_all/n', 0):.0f} | "
                  f"infra {s.get('infrastructure_errors', 0)} | "
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


__all__ = ["SealPPOTrainer", "TRAINER_MODE"]
