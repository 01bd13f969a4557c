"""``seal_tool_env``: a verl agent loop that drives one SEAL Gymnasium env per sample.

Per sample (a dataset row with ``agent_name="seal_tool_env"`` and the ``seal_*`` columns written by
``seal_trainer.data``):

1. take an env from this worker's pool (``seal_trainer.envpool``), adopting the latest published training
   interface first (training rows only; ``seal_mode="eval"`` rows use an untouched eval env);
2. ``reset`` it to the row's task (blocking env calls run in a thread: ``asyncio.to_thread``), render the
   observation with the tokenizer's chat template and ``tools=info["tools"]`` (a template that ignores tools
   is replaced by SEAL's tool template of ``seal.tool_format``: ``seal_envs.tool_template``); the env decodes
   the same format;
3. loop: generate through verl's LLM server client -> decode -> ``env.step(text)`` -> append the env's
   tool/user messages as context tokens (response mask 0) with verl's continuous-token builder, so the
   trained token stream is exactly the one that was generated (no re-tokenisation drift);
4. stop when the env terminates/truncates, the response budget (``rollout.response_length``) is spent, or
   the assistant-turn cap is reached (then ``env.truncate()`` judges the turn in progress and labels the turns
   never reached, so labels and tags cover the whole task, as the reference pads them); return
   ``AgentLoopOutput`` with the env's 0/1 reward and per-sample ``extra_fields``: ``seal_labels`` and
   ``seal_tags`` (one per turn of the task), ``seal_infrastructure_error``, ``seal_task_id``,
   ``seal_interface_version``, ``seal_truncated``;
5. a training episode's task id, labels, tags, reward and infrastructure flag are also posted to the
   ``InterfaceBoard`` (``seal_trainer.envpool``), from which the closed loop drains every rollout of the step,
   including those of groups that dynamic sampling (``algorithm.filter_groups``) drops.

A failing env (reset or step raising, sandbox died, an infrastructure label) never raises out of ``run``:
the sample is returned with reward 0, ``seal_infrastructure_error=True`` and an all-zero response mask, and
the trainer (``seal_trainer.trainer``) leaves it out of GRPO groups and counts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from seal_envs.evaluation.batch_generate import row_seed
from seal_envs.formats import ToolFormat, get_tool_format
from seal_envs.tool_template import ensure_tool_template
from seal_trainer.config import seal_config_from
from seal_trainer.envpool import EnvSpec, board_get, board_post_rollout, get_board, get_env_pool

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("SEAL_LOGGING_LEVEL", "WARNING"))

AGENT_NAME = "seal_tool_env"
INFRA_LABELS = frozenset({"infrastructure_error", "task_error"})
SEEDED_BACKENDS = ("hf", "vllm")  # rollout backends whose requests take a per-request sampling "seed"


def _scalar(value: Any) -> Any:
    """Dataset fields arrive as numpy scalars / 0-d arrays; make them plain Python."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def spec_from_row(row: dict[str, Any], defaults: dict[str, Any] | None = None) -> EnvSpec:
    d = {**(defaults or {})}
    for key in ("domain", "mode", "sandbox", "max_steps_per_turn", "tasks", "env_id"):
        value = row.get(f"seal_{key}")
        if value is not None and value != "":
            d[key] = _scalar(value)
    if "max_steps_per_turn" in d:
        d["max_steps_per_turn"] = int(d["max_steps_per_turn"])
    return EnvSpec(**d)


def _new_tools_message(old: list[dict], new: list[dict], tool_format: ToolFormat) -> dict[str, str] | None:
    """Tools added mid-episode (e.g. BFCL miss_func) as a system message, since the prompt is already fixed."""
    old_names = {t.get("function", {}).get("name") for t in old}
    added = [t for t in new if t.get("function", {}).get("name") not in old_names]
    if not added:
        return None
    return {"role": "system", "content": tool_format.announce_tools(added)}


async def _post_outcome(output: AgentLoopOutput) -> None:
    """Post a finished training episode to the board, for the closed loop's failure profile: it sees every
    rollout, also those of groups that dynamic sampling (``algorithm.filter_groups``) drops before the update."""
    extra = output.extra_fields
    record = {"task_id": extra.get("seal_task_id", ""), "labels": json.loads(extra["seal_labels"]),
              "tags": json.loads(extra["seal_tags"]), "reward": float(output.reward_score or 0.0),
              "infrastructure_error": bool(extra.get("seal_infrastructure_error"))}
    try:
        await board_post_rollout(get_board(), record)
    except Exception:  # the profile then misses this rollout; the rollout itself is not at fault
        logger.warning("could not post a rollout to the interface board", exc_info=True)


@register(AGENT_NAME)
class SealToolEnvAgentLoop(AgentLoopBase):
    """Multi-turn tool use against a SEAL env (see module docstring)."""

    # the policy version of this worker's latest generation: what a sample that never generated reports
    # (verl reads min/max_global_steps of every sample; None crashed the step when all samples failed)
    last_global_steps: int = 0

    def __init__(self, *args, **kwargs):
        kwargs.pop("tools", None)  # verl's own tool list; our tools come from the env
        super().__init__(*args, **kwargs)
        seal = seal_config_from(self.config)
        self.tool_format = get_tool_format(seal.tool_format)
        self.env_defaults = seal.env_defaults()
        self.pool_size = int(seal.env_pool_size or 0) or None
        self.max_assistant_turns = int(seal.max_assistant_turns or 0) or None
        self.max_message_tokens = int(seal.max_message_tokens or 0) or None
        self.response_length = int(self.rollout_config.response_length)
        ensure_tool_template(self.tokenizer, str(self.config.actor_rollout_ref.model.path), self.tool_format)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        spec = spec_from_row(kwargs, self.env_defaults)
        task_id = _scalar(kwargs.get("seal_task_id"))
        seed = _scalar(kwargs.get("seal_seed", 0)) or 0
        pool = get_env_pool(spec, self.pool_size)
        metrics: dict[str, float] = {}
        if spec.mode == "train":
            try:
                version, doc = await board_get(get_board(), pool.interface_version)
                pool.apply_interface(doc, version)
            except Exception:  # the board is an optimisation of the loop, never a reason to fail a rollout
                logger.warning("could not read the interface board", exc_info=True)
        env = None
        try:
            env = await pool.acquire()
            output = await self._episode(env, pool, spec, task_id, int(seed), sampling_params, metrics, kwargs)
        except Exception as exc:  # anything our side breaks: mask the sample, keep the worker alive
            logger.warning("SEAL episode failed (task %s): %r", task_id, exc, exc_info=True)
            if env is not None:
                await pool.release(env, broken=True)
                env = None
            output = await self._failed_output(kwargs, task_id, repr(exc), metrics)
        finally:
            if env is not None and getattr(env, "_seal_in_use", False):
                env._seal_in_use = False
                await pool.release(env)
        if spec.mode == "train":
            await _post_outcome(output)
        return output

    async def _episode(self, env, pool, spec, task_id, seed, sampling_params, metrics, row) -> AgentLoopOutput:
        env._seal_in_use = True
        options = {"task_id": task_id} if task_id else None
        obs, info = await asyncio.to_thread(env.reset, seed=seed, options=options)
        messages = [dict(m) for m in obs]
        tools = info["tools"]
        interface_version = int(info.get("interface_version", 0))
        prompt_ids = await self.ct_build_initial_tokens(messages, tools=tools)
        runtime_ids = list(prompt_ids)
        response_mask: list[int] = []
        logprobs: list[float] | None = [] if sampling_params.get("logprobs") else None
        request_id = uuid4().hex
        sample_seed = self._sample_seed(row)
        reward, labels, infra, truncated = 0.0, list(info.get("labels", [])), False, False
        tags = list(info.get("tags", []))
        assistant_turns, user_turns = 0, 1
        min_steps = max_steps = None
        gen_time = tool_time = 0.0
        if info.get("task_error"):
            infra = True
        while not infra:
            budget = self.response_length - len(response_mask)
            if budget <= 0 or (self.max_assistant_turns and assistant_turns >= self.max_assistant_turns):
                truncated = True
                break
            params = {**sampling_params, "max_tokens": min(budget, self.max_message_tokens or budget)}
            if sample_seed is not None:
                params["seed"] = row_seed(sample_seed, assistant_turns)
            timing: dict[str, float] = {}
            with simple_timer("generate", timing):
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=runtime_ids,
                                                         sampling_params=params)
            gen_time += timing.get("generate", 0.0)
            steps = out.extra_fields.get("global_steps")
            if steps is not None:
                SealToolEnvAgentLoop.last_global_steps = int(steps)
            min_steps = steps if min_steps is None else min_steps
            max_steps = steps if steps is not None else max_steps
            token_ids = list(out.token_ids)[:budget]
            out_lp = list(out.log_probs)[: len(token_ids)] if (logprobs is not None and out.log_probs) else None
            if logprobs is not None and out_lp is None:
                out_lp = [0.0] * len(token_ids)
            merged, response_mask, logprobs = await self.ct_merge_assistant_token(
                runtime_ids, token_ids, response_mask, logprobs, out_lp)
            runtime_ids = merged.token_ids
            assistant_turns += 1
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": text})
            with simple_timer("tool", timing):
                obs, step_reward, terminated, env_truncated, info = await asyncio.to_thread(env.step, text)
            tool_time += timing.get("tool", 0.0)
            labels, tags = list(info.get("labels", labels)), list(info.get("tags", tags))
            if info.get("infrastructure_error") or info.get("task_error") or (info.get("label") in INFRA_LABELS):
                infra = True
                break
            if terminated or env_truncated:
                reward = float(step_reward)
                truncated = bool(env_truncated and not terminated)
                break
            if len(response_mask) >= self.response_length or out.stop_reason == "length":
                truncated = True
                break
            new_messages = [dict(m) for m in obs]
            extra = _new_tools_message(tools, info.get("tools", tools), self.tool_format)
            if extra is not None:
                new_messages.append(extra)
                tools_seen = {t["function"]["name"] for t in tools}
                tools = tools + [t for t in info["tools"] if t["function"]["name"] not in tools_seen]
            if not new_messages:
                continue
            user_turns += sum(m["role"] == "user" for m in new_messages)
            updated = messages + new_messages
            merged, response_mask, logprobs = await self.ct_merge_context_msg(
                messages, updated, runtime_ids, response_mask, logprobs, tools=None)
            runtime_ids, messages = merged.token_ids, updated
        if truncated and not infra:
            info = await asyncio.to_thread(env.unwrapped.truncate, "the rollout's response budget or turn cap ran out")
            labels, tags = list(info.get("labels", labels)), list(info.get("tags", tags))
            infra = bool(info.get("infrastructure_error"))
        response_ids = runtime_ids[len(prompt_ids):][: self.response_length]
        response_mask = response_mask[: self.response_length]
        if logprobs is not None:
            logprobs = logprobs[: self.response_length]
        if not response_ids:  # verl needs at least one response token per sample
            response_ids, response_mask = [self._pad_id()], [0]
            logprobs = [0.0] if logprobs is not None else None
        if infra:
            response_mask = [0] * len(response_ids)
            reward = 0.0
        extra_fields = self._extra(task_id, labels, tags, infra, truncated, interface_version, spec.mode)
        extra_fields["min_global_steps"] = self.last_global_steps if min_steps is None else min_steps
        extra_fields["max_global_steps"] = self.last_global_steps if max_steps is None else max_steps
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response_ids, response_mask=response_mask,
            response_logprobs=logprobs, reward_score=reward, num_turns=user_turns + assistant_turns,
            metrics=AgentLoopMetrics(generate_sequences=gen_time, tool_calls=tool_time), extra_fields=extra_fields,
        )

    def _sample_seed(self, row: dict[str, Any]) -> int | None:
        """This sample's sampling seed, from the run's seed (``rollout.seed``), the step, the dataset row and the
        rollout's index in its group, so the same seed replays the same rollouts whatever batches the server
        forms. None where verl does not say which of the group's rollouts this is (then the server seeds it), and
        for backends other than ``hf`` and ``vllm`` (whose requests take a ``seed``)."""
        session = row.get("session_id")
        if session is None or self.rollout_config.name not in SEEDED_BACKENDS:
            return None
        index = _scalar(row.get("index", 0))
        steps = _scalar(row.get("global_steps", 0))
        validate = _scalar(row.get("seal_mode", "train")) == "eval"
        return row_seed(int(self.rollout_config.seed or 0), int(steps or 0), int(index or 0), int(session),
                        int(validate))

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id or 0)

    @staticmethod
    def _extra(task_id, labels, tags, infra, truncated, interface_version, mode) -> dict[str, Any]:
        return {
            "seal_task_id": task_id or "",
            "seal_labels": json.dumps(list(labels)),
            "seal_tags": json.dumps(list(tags)),
            "seal_infrastructure_error": bool(infra),
            "seal_truncated": bool(truncated),
            "seal_interface_version": int(interface_version),
            "seal_mode": mode,
        }

    async def _failed_output(self, row, task_id, reason: str, metrics) -> AgentLoopOutput:
        messages = [dict(m) for m in (_scalar(row.get("raw_prompt")) or [{"role": "user", "content": ""}])]
        try:
            prompt_ids = await self.ct_build_initial_tokens(messages)
        except Exception:
            prompt_ids = [self._pad_id()]
        extra = self._extra(task_id, ["infrastructure_error"], ["infrastructure_error"], True, False, 0,
                            _scalar(row.get("seal_mode")) or "train")
        extra["seal_error"] = reason[:500]
        extra["min_global_steps"] = extra["max_global_steps"] = self.last_global_steps
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=[self._pad_id()], response_mask=[0],
            response_logprobs=[0.0] if self.rollout_config.calculate_log_probs else None, reward_score=0.0,
            num_turns=1, metrics=AgentLoopMetrics(), extra_fields=extra,
        )


__all__ = ["AGENT_NAME", "SealToolEnvAgentLoop", "spec_from_row"]
