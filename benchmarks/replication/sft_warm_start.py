"""Supervised warm start of the tiny Qwen2 policy on executed synthetic shop demonstrations.

    python benchmarks/replication/sft_warm_start.py --out benchmarks/replication/results/models [--steps 1500]

1. Build the tiny base model + tokenizer with ``seal_trainer.tiny.build_tiny_model`` (a little larger than its
   default: ``MODEL`` below), in ``<out>/base``.
2. Record the demonstrations of the ``sft`` task set (``common.py``: synthetic, disjoint from the RL ``train``
   and the ``heldout`` sets, which are never rendered here) and train on their assistant tokens, with the
   project's warm start (``seal_trainer.warm_start``: executed ground truth through ``ToolUseEnv`` in eval mode,
   each demonstration must earn reward 1; one sequence per tool list; labels only on assistant messages).
3. Save an ordinary Hugging Face folder ``<out>/sft`` and ``<out>/sft/sft_log.json`` (loss curve, settings).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DOMAIN, RESULTS, set_threads, task_set, task_set_path, write_json  # noqa: E402

MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=8192)


def build_base(out: Path, seed: int = 0) -> Path:
    from seal_trainer.tiny import build_tiny_model

    return build_tiny_model(out / "base", domains=(DOMAIN,), seed=seed, model_kwargs=MODEL)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS / "models")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--init", type=Path, default=None, help="continue from this model folder instead of the base")
    p.add_argument("--time-limit", type=float, default=None, help="stop training after this many seconds")
    args = p.parse_args(argv)
    set_threads(args.threads)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_trainer.warm_start import mean_loss, record_demonstrations, render_examples, train

    t_all = time.time()
    sft_tasks = task_set("sft")
    base = build_base(args.out, args.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    t0 = time.time()
    demos = record_demonstrations(sft_tasks, DOMAIN)
    examples = [e for d in demos for e in render_examples(tokenizer, d)]
    t_demo = time.time() - t0
    n_tok = sum(len(e["input_ids"]) for e in examples)
    n_lab = sum(sum(t != -100 for t in e["labels"]) for e in examples)
    print(f"[sft] {len(demos)} demonstrations (all reward 1) -> {len(examples)} sequences, {n_tok} tokens, "
          f"{n_lab} assistant tokens ({t_demo:.1f}s)", flush=True)
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.init or base, dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    probe = examples[:: max(1, len(examples) // 64)]  # a fixed sample for the before/after loss
    before = mean_loss(model, probe)
    history = train(model, examples, args.steps, lr=args.lr, seed=args.seed, time_limit_s=args.time_limit)
    after = mean_loss(model, probe)
    dest = args.out / "sft"
    if args.init and args.init.resolve() == dest.resolve():
        previous = json.loads((dest / "sft_log.json").read_text())
        log_prior = [previous] + previous.get("prior", [])
    else:
        log_prior = []
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    log = {"base": str(base), "init": str(args.init or base), "model": MODEL, "params": n_params, "steps": args.steps, "lr": args.lr,
           "seed": args.seed, "tasks": str(task_set_path("sft").relative_to(RESULTS)), "n_tasks": len(sft_tasks),
           "sequences": len(examples), "tokens": n_tok, "assistant_tokens": n_lab,
           "loss_before": before, "loss_after": after, "history": history,
           "train_time_s": history[-1]["time_s"] if history else 0.0, "total_time_s": time.time() - t_all,
           "prior": log_prior}
    write_json(dest / "sft_log.json", log)
    print(f"[sft] params {n_params}; assistant-token loss {before:.3f} -> {after:.3f}; saved {dest} "
          f"({time.time() - t_all:.0f}s total)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
