"""Why seal-train's CPU mode runs the actor and reference in float32: bf16 autocast vs fp32 on this CPU.

verl's FSDP engine computes in bf16 unless ``fsdp_config.mixed_precision`` says otherwise; on CPUs without
bf16 matrix units that is several times slower than fp32. This times a forward + backward (the actor update)
and a forward (log-probs) of the tiny Qwen2 on one sequence of ``--tokens`` tokens, both precisions
alternating in one run so that the ratio is robust to machine noise.

    python benchmarks/cpu_dtype_bench.py [--tokens 2800] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=2800)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from seal_trainer.tiny import build_tiny_model

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent / "replication"))
    from sft_warm_start import MODEL

    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(build_tiny_model(Path(tmp) / "m", model_kwargs=MODEL),
                                                     dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens))
    modes = {"fp32": contextlib.nullcontext, "bf16 autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}
    times: dict[str, dict[str, list[float]]] = {m: {"fwd+bwd": [], "fwd": []} for m in modes}
    for i in range(args.repeats + 1):  # the first round warms up and is dropped
        for name, ctx in modes.items():
            t0 = time.perf_counter()
            with ctx():
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            model.zero_grad(set_to_none=True)
            t1 = time.perf_counter()
            with torch.no_grad(), ctx():
                model(input_ids=ids)
            t2 = time.perf_counter()
            if i:
                times[name]["fwd+bwd"].append(t1 - t0)
                times[name]["fwd"].append(t2 - t1)
    print(f"tiny Qwen2 {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, {args.tokens} tokens, "
          f"{args.threads} threads, median of {args.repeats}")
    for phase in ("fwd+bwd", "fwd"):
        fp32, bf16 = (statistics.median(times[m][phase]) for m in modes)
        print(f"{phase:8s} fp32 {fp32 * 1000:8.0f} ms   bf16 autocast {bf16 * 1000:8.0f} ms   bf16/fp32 {bf16 / fp32:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
