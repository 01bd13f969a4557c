"""The actor update's attention on one GRPO group: dense under the packed mask vs block by block.

SEAL's CPU update (``seal_trainer/shared_prefix.py``) packs a group's rows as one sequence, its prompt once and every
response after it. Under transformers' sdpa the packed sequence's attention runs dense under a boolean mask, every
query against every key of the group (other responses' included); ``seal_packed_sdpa``, the actor's attention on
CPU, runs the prompt causally on itself once and each response against the prompt's keys and its own. This times a
forward + backward of one group, as the actor computes it (train mode, gradient checkpointing, logits only at the
response positions), both attentions alternating in one run so that the ratio is robust to machine noise.

    python benchmarks/packed_update.py [--model PATH] [--prompt 1600 --responses 8 --response 370] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="default: the base SmolLM2-135M-Instruct (the warm start has its shape)")
    p.add_argument("--prompt", type=int, default=1600, help="prompt tokens (shop's first prompt: about 1,600)")
    p.add_argument("--responses", type=int, default=8, help="rows in the group")
    p.add_argument("--response", type=int, default=370, help="tokens per response")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from seal_trainer.models import SMOLLM2, resolve_model
    from seal_trainer.shared_prefix import SEGMENTS_KWARG, pack_rows, register_packed_attention

    torch.set_num_threads(args.threads)
    packed_attention = register_packed_attention()
    model = AutoModelForCausalLM.from_pretrained(args.model or resolve_model(SMOLLM2), dtype=torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (args.prompt,), generator=g)
    rows = [torch.cat([prompt, torch.randint(0, model.config.vocab_size, (args.response,), generator=g)])
            for _ in range(args.responses)]
    packed = pack_rows(rows, [torch.arange(len(r)) for r in rows], [args.prompt] * len(rows))
    keep = torch.cat([index[args.prompt - 1:-1] for index in packed.index])  # positions predicting response tokens
    labels = torch.cat([r[args.prompt:] for r in rows])

    def step(attention: str) -> tuple[float, torch.Tensor]:
        model.set_attn_implementation(attention)
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logits = model(input_ids=packed.input_ids[None], position_ids=packed.position_ids[None],
                       attention_mask=packed.attention_mask[None, None], use_cache=False, logits_to_keep=keep,
                       **{SEGMENTS_KWARG: packed.segments}).logits[0]
        log_probs = torch.log_softmax(logits, dim=-1).gather(1, labels[:, None])[:, 0]
        log_probs.mean().backward()
        return time.perf_counter() - start, log_probs.detach()

    arms = {"dense (sdpa)": "sdpa", "block-wise (seal_packed_sdpa)": packed_attention}
    times: dict[str, list[float]] = {name: [] for name in arms}
    outputs = {}
    for _ in range(args.repeats):
        for name, attention in arms.items():
            seconds, outputs[name] = step(attention)
            times[name].append(seconds)
            print(f"{name:30s} forward+backward {seconds:6.1f} s", flush=True)
    (dense, block) = (statistics.median(times[name]) for name in arms)
    difference = (outputs["dense (sdpa)"] - outputs["block-wise (seal_packed_sdpa)"]).abs().max().item()
    result = {"tokens": int(packed.input_ids.numel()), "prompt": args.prompt, "responses": args.responses,
              "response": args.response, "threads": args.threads, "seconds": times,
              "median_s": {name: round(statistics.median(t), 2) for name, t in times.items()},
              "speedup": round(dense / block, 2), "max_log_prob_difference": difference}
    print(f"{result['tokens']} packed tokens: dense {dense:.1f} s, block-wise {block:.1f} s (median of "
          f"{args.repeats}): {dense / block:.2f}x; largest log-prob difference {difference:.1e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
