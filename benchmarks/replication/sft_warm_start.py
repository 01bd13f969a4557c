"""Supervised warm start of the tiny Qwen2 policy on executed shop demonstrations.

    python benchmarks/replication/sft_warm_start.py --out benchmarks/replication/results/models [--steps 300]

1. Build the tiny base model + tokenizer with ``seal_trainer.tiny.build_tiny_model`` (a little larger than its
   default: ``MODEL`` below), in ``<out>/base``.
2. For each *training* task (the fixed split in ``common.py``; held-out tasks are never rendered), play its
   ground truth through ``ToolUseEnv(domain="shop", sandbox="inprocess", mode="eval")``: one assistant message
   per ground-truth call (``<tool_call>{json}</tool_call>``, exactly the format our parser reads), tool outputs
   from really executing it, then a final text answer that contains the turn's ``required_response`` strings
   (or an abstention / a request for the missing detail on turns without ground-truth calls). Each
   demonstration must earn reward 1 from the verifier, or the script stops.
3. Render each transcript with the tokenizer's chat template and the tools the env offered at that point
   (the same call ``HFPolicy`` and the trainer's agent loop make), one sequence per distinct tool list
   (miss_func turns add tools), and train only on assistant tokens: each assistant message's content plus its
   ``<|im_end|>``. Everything else (tool list, user turns, tool outputs) has label -100.
4. Save an ordinary Hugging Face folder ``<out>/sft`` and ``<out>/sft/sft_log.json`` (loss curve, settings).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DOMAIN, RESULTS, check_split, set_threads, write_json  # noqa: E402

MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=8192)
IM_END = "<|im_end|>"
ANSWER_TEXT = "Here is what I found: {}."
DONE_TEXT = "Done."
ASK_TEXT = "I need one more detail before I can do that. Could you tell me what to use?"
ABSTAIN_TEXT = "I cannot do that with the functions I have available."


# ------------------------------------------------------------------ demonstrations


def turn_answer(turn) -> str:
    if turn.ground_truth:
        return ANSWER_TEXT.format(", ".join(turn.required_response)) if turn.required_response else DONE_TEXT
    if turn.required_response:
        return ANSWER_TEXT.format(", ".join(turn.required_response))
    return ABSTAIN_TEXT if turn.expects_abstention else ASK_TEXT


@dataclass
class Demonstration:
    task_id: str
    messages: list[dict[str, str]]  # role/content only, as HFPolicy sends them
    tools_at: dict[int, list[dict[str, Any]]]  # assistant message index -> tools offered when it was generated
    reward: float


def record_demonstration(env, task) -> Demonstration:
    """Execute the task's ground truth through the env; returns the transcript and the tools at each action."""
    from seal_envs.parsing import format_tool_call

    obs, info = env.reset(options={"task_id": task.id})
    messages = [{"role": m["role"], "content": m["content"]} for m in obs]
    tools_at: dict[int, list] = {}
    reward, done = 0.0, False
    for turn in task.turns:
        actions = [format_tool_call(c) for c in turn.ground_truth] + [turn_answer(turn)]
        for action in actions:
            if done:
                raise RuntimeError(f"{task.id}: episode ended before the ground truth was played")
            tools_at[len(messages)] = info["tools"]
            messages.append({"role": "assistant", "content": action})
            obs, reward, terminated, truncated, info = env.step(action)
            messages += [{"role": m["role"], "content": m["content"]} for m in obs]
            done = terminated or truncated
    return Demonstration(task.id, messages, tools_at, float(reward))


def record_demonstrations(tasks, sandbox: str = "inprocess") -> list[Demonstration]:
    from seal_envs.env import ToolUseEnv

    env = ToolUseEnv(domain=DOMAIN, tasks=list(tasks), mode="eval", sandbox=sandbox)
    try:
        demos = [record_demonstration(env, t) for t in tasks]
    finally:
        env.close()
    bad = [d.task_id for d in demos if d.reward != 1.0]
    if bad:
        raise RuntimeError(f"ground-truth demonstrations did not pass the verifier: {bad}")
    return demos


# ------------------------------------------------------------------ rendering with assistant-only labels


def render_segments(tokenizer, demo: Demonstration) -> list[dict[str, Any]]:
    """One training sequence per distinct tool list: ``input_ids`` and ``labels`` (-100 off assistant tokens)."""
    groups: dict[str, list[int]] = {}
    for idx, tools in demo.tools_at.items():
        groups.setdefault(json.dumps(tools, sort_keys=True), []).append(idx)
    out = []
    for key, indices in groups.items():
        tools = json.loads(key)
        last = max(indices)
        full = tokenizer.apply_chat_template(demo.messages[: last + 1], tools=tools, tokenize=False)
        spans = []
        for i in sorted(indices):
            prefix = tokenizer.apply_chat_template(demo.messages[:i], tools=tools, tokenize=False,
                                                   add_generation_prompt=True)
            target = demo.messages[i]["content"] + IM_END
            if not full.startswith(prefix) or full[len(prefix): len(prefix) + len(target)] != target:
                raise RuntimeError(f"{demo.task_id}: chat template is not prefix-stable at message {i}")
            spans.append((len(prefix), len(prefix) + len(target)))
        enc = tokenizer(full, return_offsets_mapping=True, add_special_tokens=False)
        labels = []
        for tok, (s, e) in zip(enc["input_ids"], enc["offset_mapping"]):
            inside = e > s and any(a <= s and e <= b for a, b in spans)
            labels.append(tok if inside else -100)
        out.append({"task_id": demo.task_id, "input_ids": list(enc["input_ids"]), "labels": labels,
                    "text": full, "spans": spans})
    return out


def assistant_text_of(tokenizer, example: dict[str, Any]) -> str:
    """The text the loss covers (for checks): decoded labelled tokens."""
    return tokenizer.decode([t for t in example["labels"] if t != -100], skip_special_tokens=False)


# ------------------------------------------------------------------ training


def sequence_loss(model, example) -> "torch.Tensor":
    import torch

    ids = torch.tensor([example["input_ids"]])
    labels = torch.tensor([example["labels"]])
    return model(input_ids=ids, labels=labels).loss


def train(model, examples: list[dict[str, Any]], steps: int, lr: float = 2e-3, seed: int = 0,
          log_every: int = 10, warmup: int = 20, time_limit_s: float | None = None) -> list[dict[str, float]]:
    """AdamW, batch 1 (one rendered sequence), cosine schedule with warmup; returns the loss history."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    order: list[int] = []
    history, window = [], []
    model.train()
    t0 = time.time()
    for step in range(steps):
        if not order:
            order = list(range(len(examples)))
            rng.shuffle(order)
        loss = sequence_loss(model, examples[order.pop()])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        window.append(float(loss.detach()))
        if (step + 1) % log_every == 0 or step == steps - 1:
            history.append({"step": step + 1, "loss": sum(window) / len(window), "time_s": time.time() - t0})
            print(f"[sft] step {step + 1}/{steps} loss {history[-1]['loss']:.4f} ({time.time() - t0:.0f}s)", flush=True)
            window = []
        if time_limit_s and time.time() - t0 > time_limit_s:
            print(f"[sft] time limit {time_limit_s}s reached at step {step + 1}", flush=True)
            history.append({"step": step + 1, "loss": float(loss.detach()), "time_s": time.time() - t0, "stopped": True})
            break
    model.eval()
    return history


def mean_loss(model, examples) -> float:
    import torch

    with torch.no_grad():
        return sum(float(sequence_loss(model, e)) for e in examples) / len(examples)


def build_base(out: Path, seed: int = 0) -> Path:
    from seal_trainer.tiny import build_tiny_model

    return build_tiny_model(out / "base", domains=(DOMAIN,), seed=seed, model_kwargs=MODEL)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS / "models")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=None, help="stop training after this many seconds")
    args = p.parse_args(argv)
    set_threads(args.threads)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t_all = time.time()
    train_tasks, eval_tasks = check_split()
    base = build_base(args.out, args.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    t0 = time.time()
    demos = record_demonstrations(train_tasks)
    examples = [e for d in demos for e in render_segments(tokenizer, d)]
    t_demo = time.time() - t0
    n_tok = sum(len(e["input_ids"]) for e in examples)
    n_lab = sum(sum(t != -100 for t in e["labels"]) for e in examples)
    print(f"[sft] {len(demos)} demonstrations (all reward 1) -> {len(examples)} sequences, {n_tok} tokens, "
          f"{n_lab} assistant tokens ({t_demo:.1f}s)", flush=True)
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    before = mean_loss(model, examples)
    history = train(model, examples, args.steps, lr=args.lr, seed=args.seed, time_limit_s=args.time_limit)
    after = mean_loss(model, examples)
    dest = args.out / "sft"
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    log = {"base": str(base), "model": MODEL, "params": n_params, "steps": args.steps, "lr": args.lr,
           "seed": args.seed, "train_tasks": [t.id for t in train_tasks], "eval_tasks": [t.id for t in eval_tasks],
           "sequences": len(examples), "tokens": n_tok, "assistant_tokens": n_lab,
           "loss_before": before, "loss_after": after, "history": history,
           "train_time_s": history[-1]["time_s"] if history else 0.0, "total_time_s": time.time() - t_all}
    write_json(dest / "sft_log.json", log)
    print(f"[sft] params {n_params}; assistant-token loss {before:.3f} -> {after:.3f}; saved {dest} "
          f"({time.time() - t_all:.0f}s total)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
