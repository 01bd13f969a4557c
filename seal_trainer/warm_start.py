"""Supervised warm start on executed demonstrations, so that RL starts from a policy that emits tool calls.

GRPO learns nothing from a policy that never succeeds (every group's advantage is zero). A short SFT on the
domain's own ground truth fixes that for small models:

1. ``record_demonstrations`` plays each task's ground truth through a ``ToolUseEnv`` in ``eval`` mode: one
   assistant message per call, written in the run's tool format (``seal.tool_format``, ``seal_envs.formats``), tool
   outputs from really executing it, then a final answer containing the turn's ``required_response`` strings
   (or an abstention / a request for the missing detail). Each demonstration must earn reward 1.
2. ``render_examples`` renders a transcript with the tokenizer's chat template and the tools offered when each
   message was generated (one sequence per distinct tool list: miss_func turns add tools), with labels only on
   assistant content and the end-of-message token; tool lists, user turns and tool outputs get -100.
3. ``train`` fits a causal LM on those sequences (AdamW, batch 1, cosine schedule with warmup).

``warm_started_model`` runs the three on a Hugging Face folder and caches the result by recipe: the trainer's
``seal.warm_start`` block (``WarmStartConfig``) selects it for ``seal-train``; the prompts are rendered with SEAL's
tool template of the same format where the model's own template drops ``tools=``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from seal_envs.formats import DEFAULT_TOOL_FORMAT, ToolFormat, get_tool_format
from seal_trainer.model_cache import RECIPE_FILE, is_built, save_built

ANSWER_TEXT = "Here is what I found: {}."
DONE_TEXT = "Done."
ASK_TEXT = "I need one more detail before I can do that. Could you tell me what to use?"
ABSTAIN_TEXT = "I cannot do that with the functions I have available."


def turn_answer(turn) -> str:
    """The final assistant message of a demonstrated turn."""
    if turn.required_response:
        return ANSWER_TEXT.format(", ".join(turn.required_response))
    if turn.ground_truth:
        return DONE_TEXT
    return ABSTAIN_TEXT if turn.expects_abstention else ASK_TEXT


@dataclass
class Demonstration:
    task_id: str
    messages: list[dict[str, str]]  # role/content only, as the policy sees them
    tools_at: dict[int, list[dict[str, Any]]]  # assistant message index -> tools offered when it was generated
    reward: float


def record_demonstration(env, task) -> Demonstration:
    """Execute ``task``'s ground truth through ``env`` in its tool format; the transcript and the tools at each
    action."""
    tool_format = env.unwrapped.tool_format
    obs, info = env.reset(options={"task_id": task.id})
    messages = [{"role": m["role"], "content": m["content"]} for m in obs]
    tools_at: dict[int, list] = {}
    reward, done = 0.0, False
    for turn in task.turns:
        for action in [tool_format.format_calls([c]) for c in turn.ground_truth] + [turn_answer(turn)]:
            if done:
                raise RuntimeError(f"{task.id}: episode ended before the ground truth was played")
            tools_at[len(messages)] = info["tools"]
            messages.append({"role": "assistant", "content": action})
            obs, reward, terminated, truncated, info = env.step(action)
            messages += [{"role": m["role"], "content": m["content"]} for m in obs]
            done = terminated or truncated
    return Demonstration(task.id, messages, tools_at, float(reward))


def record_demonstrations(tasks: Sequence[Any], domain: str = "shop", sandbox: str = "inprocess",
                          tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> list[Demonstration]:
    """Demonstrations of ``tasks`` of ``domain``; raises if one does not pass the verifier."""
    from seal_envs.env import ToolUseEnv

    env = ToolUseEnv(domain=domain, tasks=list(tasks), mode="eval", sandbox=sandbox, tool_format=tool_format)
    try:
        demos = [record_demonstration(env, t) for t in tasks]
    finally:
        env.close()
    bad = [d.task_id for d in demos if d.reward != 1.0]
    if bad:
        raise RuntimeError(f"ground-truth demonstrations did not pass the verifier: {bad}")
    return demos


def render_examples(tokenizer, demo: Demonstration) -> list[dict[str, Any]]:
    """One training sequence per distinct tool list: ``input_ids`` and ``labels`` (-100 off assistant tokens)."""
    end = tokenizer.eos_token
    groups: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
    for idx, tools in demo.tools_at.items():  # rendered as offered: key order is part of the prompt
        groups.setdefault(json.dumps(tools), (tools, []))[1].append(idx)
    out = []
    for tools, indices in groups.values():
        full = tokenizer.apply_chat_template(demo.messages[: max(indices) + 1], tools=tools, tokenize=False)
        spans = []
        for i in sorted(indices):
            prefix = tokenizer.apply_chat_template(demo.messages[:i], tools=tools, tokenize=False,
                                                   add_generation_prompt=True)
            target = demo.messages[i]["content"] + end
            if not full.startswith(prefix) or full[len(prefix): len(prefix) + len(target)] != target:
                raise RuntimeError(f"{demo.task_id}: the chat template is not prefix-stable at message {i}")
            spans.append((len(prefix), len(prefix) + len(target)))
        enc = tokenizer(full, return_offsets_mapping=True, add_special_tokens=False)
        labels = [tok if e > s and any(a <= s and e <= b for a, b in spans) else -100
                  for tok, (s, e) in zip(enc["input_ids"], enc["offset_mapping"])]
        out.append({"task_id": demo.task_id, "input_ids": list(enc["input_ids"]), "labels": labels})
    return out


def supervised_text(tokenizer, example: dict[str, Any]) -> str:
    """The text the loss covers: the decoded labelled tokens."""
    return tokenizer.decode([t for t in example["labels"] if t != -100], skip_special_tokens=False)


def sequence_loss(model, example: dict[str, Any], dtype: str = "float32"):
    """The example's token-mean loss; ``dtype="bfloat16"`` computes the matmuls under CPU bf16 autocast while the
    weights (and so the optimizer's master copy) stay fp32, as verl's mixed precision does."""
    import torch

    compute = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext())
    with compute:
        return model(input_ids=torch.tensor([example["input_ids"]]), labels=torch.tensor([example["labels"]])).loss


def mean_loss(model, examples: Sequence[dict[str, Any]]) -> float:
    import torch

    with torch.no_grad():
        return sum(float(sequence_loss(model, e)) for e in examples) / len(examples)


def train(model, examples: Sequence[dict[str, Any]], steps: int, lr: float = 2e-3, seed: int = 0,
          warmup: int = 20, log_every: int = 10, time_limit_s: float | None = None,
          dtype: str = "float32") -> list[dict[str, float]]:
    """AdamW, batch 1 (one rendered sequence), cosine schedule with warmup, computing in ``dtype`` (see
    ``sequence_loss``); returns the loss history."""
    import torch
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    order: list[int] = []
    history, window = [], []
    model.train()
    t0 = time.time()
    bar = tqdm(range(steps), desc="sft", mininterval=5.0)
    for step in bar:
        if not order:
            order = list(range(len(examples)))
            rng.shuffle(order)
        loss = sequence_loss(model, examples[order.pop()], dtype)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        window.append(float(loss.detach()))
        if (step + 1) % log_every == 0 or step == steps - 1:
            history.append({"step": step + 1, "loss": sum(window) / len(window), "time_s": time.time() - t0})
            bar.set_postfix(loss=f"{history[-1]['loss']:.3f}")
            window = []
        if time_limit_s and time.time() - t0 > time_limit_s:
            history.append({"step": step + 1, "loss": float(loss.detach()), "time_s": time.time() - t0,
                            "stopped": True})
            break
    bar.close()
    model.eval()
    return history


@dataclass
class WarmStartConfig:
    """``seal.warm_start``: SFT on ``demonstrations`` tasks of the domain's ``split`` before RL (0 steps: none)."""

    steps: int = 0
    lr: float = 5e-5
    demonstrations: int = 120
    split: str = "sft"  # one of the domain's task_splits; "" for its tasks.json
    warmup: int = 8
    seed: int = 0


def _recipe(base: Path, domain: str, config: WarmStartConfig, tool_format: ToolFormat, dtype: str) -> str:
    marker = base / RECIPE_FILE
    base_id = marker.read_text() if marker.exists() else str(base.resolve())
    doc = {"base": base_id, "domain": domain, "config": asdict(config), "v": 1}
    if tool_format.name != DEFAULT_TOOL_FORMAT:  # the default's recipes predate formats: keep their hashes
        doc["tool_format"] = tool_format.name
    if dtype != "float32":  # bf16 compute gives other weights; fp32 recipes predate the choice: keep their hashes
        doc["compute_dtype"] = dtype
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _demonstration_tasks(domain: str, config: WarmStartConfig) -> list[Any]:
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    spec = load_domain(domain)
    if config.split and not spec.task_splits:  # only a tasks.json: demonstrate the tasks seal-train trains on
        from seal_trainer.data import split_tasks

        tasks = split_tasks(load_tasks(spec.root), None, None)[0]
        print(f"[seal] warm start: domain {spec.name!r} declares no task_splits (so no {config.split!r} split); "
              f"demonstrations come from the first half of each category of its tasks.json (seal-train's training "
              f"tasks unless seal.dataset.n_train/n_val say otherwise). Declare "
              f"task_splits with a {config.split!r} split to choose them (docs/domains.md)", flush=True)
    else:
        tasks = list(spec.split_tasks(config.split) if config.split else load_tasks(spec.root))
    if not tasks:
        raise ValueError(f"the warm start found no tasks in domain {domain!r} (split {config.split!r})")
    return tasks[: config.demonstrations]


def warm_started_model(base: str | Path, domain: str, config: WarmStartConfig, out: str | Path | None = None,
                       tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> Path:
    """``base`` fitted on executed demonstrations of ``domain`` in ``tool_format``; cached beside ``base`` by recipe
    hash.

    The folder holds the model, the tokenizer (with a tool-rendering chat template, see
    ``seal_envs.tool_template``) and ``warm_start.json`` (config, loss history, time).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_envs.evaluation.batch_generate import compute_dtype
    from seal_envs.tool_template import ensure_tool_template

    base = Path(base)
    tool_format = get_tool_format(tool_format)
    dtype = compute_dtype()
    recipe = _recipe(base, domain, config, tool_format, dtype)
    out = Path(out) if out is not None else base.with_name(f"{base.name}-ws-{recipe}")
    if is_built(out, recipe):
        return out
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(base)
    ensure_tool_template(tokenizer, base.name, tool_format)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    demos = record_demonstrations(_demonstration_tasks(domain, config), domain, tool_format=tool_format)
    examples = [e for d in demos for e in render_examples(tokenizer, d)]
    print(f"[seal] warm start of {base.name}: {config.steps} SFT steps on {len(examples)} sequences from "
          f"{len(demos)} executed {domain} demonstrations, computing in {dtype}", flush=True)
    history = train(model, examples, config.steps, lr=config.lr, seed=config.seed, warmup=config.warmup,
                    dtype=dtype)
    save_built(model, tokenizer, out, {"recipe": recipe, "base": str(base)},
               {"warm_start.json": json.dumps({"config": asdict(config), "domain": domain, "base": str(base),
                                               "tool_format": tool_format.name, "compute_dtype": dtype,
                                               "sequences": len(examples), "loss": history,
                                               "time_s": round(time.time() - t0, 1)}, indent=1)})
    return out


__all__ = ["Demonstration", "WarmStartConfig", "warm_started_model", "mean_loss", "record_demonstrations", "render_examples", "supervised_text", "train",
           "turn_answer"]
