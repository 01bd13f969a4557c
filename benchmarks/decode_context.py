"""How much of a decode step is attention over the prompt's keys/values: one batched decode step of the rollout
generator's model (grouped-query sdpa, ``seal_envs.evaluation.batch_generate``) at several batch sizes and context
lengths, median of repeated steps, the configurations interleaved so that machine noise spreads over all of them.

    python benchmarks/decode_context.py --model ~/.cache/seal/<warm-started SmolLM2 folder>

A GRPO group's 8 samples share their ~1.6-2k-token prompt. ``BxC`` gives each row its own copy of the context's
keys/values, as the generator held them before it shared prefixes; ``BxC:S`` holds the first S tokens once for
all rows, as it does now: the gap between the two is what reading the shared prefix once saves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def decode_step_s(model, batch: int, context: int, shared: int, reps: int) -> list[float]:
    """Seconds per decode step on a cache built as the generator builds it (``_reserved_layer``: each row's
    keys/values in a buffer with room, so that a step appends in place instead of copying the cache), the first
    ``shared`` tokens of the context held once for all rows and passed as the generator passes them."""
    import torch
    from transformers import DynamicCache

    from seal_envs.evaluation.batch_generate import SHARED_PREFIX, _reserved_layer

    cfg = model.config
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    own = context - shared
    cache = DynamicCache()
    cache.layers = [_reserved_layer([torch.randn(1, heads, own, dim) for _ in range(batch)],
                                    [torch.randn(1, heads, own, dim) for _ in range(batch)], reps + 1)
                    for _ in range(cfg.num_hidden_layers)]
    prefix = {SHARED_PREFIX: [(torch.randn(1, heads, shared, dim), torch.randn(1, heads, shared, dim))
                              for _ in range(cfg.num_hidden_layers)]} if shared else {}
    ids = torch.randint(0, cfg.vocab_size, (batch, 1))
    times = []
    for step in range(reps):
        mask = torch.ones(batch, own + step + 1, dtype=torch.long)
        positions = torch.full((batch, 1), context + step)
        t0 = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                  **prefix)
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--configs", nargs="+", default=["16x64", "16x2000", "8x2000", "1x2000"],
                   help="BATCHxCONTEXT, or BATCHxCONTEXT:SHARED where the first SHARED tokens are common to all rows")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from seal_envs.evaluation.batch_generate import register_grouped_sdpa

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation=register_grouped_sdpa()).eval()
    times: dict[str, list[float]] = {c: [] for c in args.configs}
    for _ in range(args.rounds):
        for config in args.configs:
            batch, context = (int(x) for x in config.split(":")[0].split("x"))
            shared = int(config.split(":")[1]) if ":" in config else 0
            times[config] += decode_step_s(model, batch, context, shared, args.reps)
    result = {"threads": torch.get_num_threads(), "dtype": "float32",
              "decode_step_s": {c: round(statistics.median(t), 4) for c, t in times.items()}}
    for config, seconds in result["decode_step_s"].items():
        print(f"batch x context[:shared] {config:>13s}: {seconds:.3f} s per decode step "
              f"(median of {len(times[config])})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
