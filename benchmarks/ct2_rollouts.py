"""Would CTranslate2 generate the rollouts faster than SEAL's batched transformers generator (issue 20, item 6)?

    pip install ctranslate2                      # not a SEAL dependency: the benchmark skips it when missing
    python benchmarks/ct2_rollouts.py [--model PATH] [--max-tokens 128] [--repeats 2] [--out results/ct2_rollouts.json]

The same requests to both engines: the first turn of 2 shop episodes x 8 samples (a GRPO step's first requests;
the prompt holds the tool schemas, ~1.5k tokens), greedy, so the two must produce the same tokens where their
float arithmetic agrees. The arms alternate ``--repeats`` times in one process with the same threads (a noisy
machine's drift falls on both). Also timed: converting the Hugging Face folder to CTranslate2's format, which a
rollout engine outside torch would redo at every weight sync, and what each engine's output shares with the
other's. CTranslate2 would replace the generator only if it wins by a clear margin including that sync.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def shop_prompts(tokenizer, episodes: int) -> list[list[int]]:
    import gymnasium as gym

    import seal_envs  # noqa: F401  (registers the envs)
    from seal_envs.tool_template import chat_prompt_ids

    env = gym.make("seal/Shop-v0", mode="eval", sandbox="inprocess")
    prompts = []
    for seed in range(episodes):
        obs, info = env.reset(seed=seed)
        prompts.append(chat_prompt_ids(tokenizer, list(obs), info["tools"]))
    env.close()
    return prompts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="a Hugging Face folder (default: SmolLM2-135M-Instruct as seal-train converts it)")
    p.add_argument("--episodes", type=int, default=2)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        import ctranslate2
    except ImportError:
        print("ctranslate2 is not installed (pip install ctranslate2): nothing to compare")
        return 0
    import torch
    from transformers import AutoTokenizer

    from seal_envs.evaluation.batch_generate import Sampling, model_generator
    from seal_envs.prefix_cache import common_prefix
    from seal_envs.tool_template import ensure_tool_template

    torch.set_num_threads(args.threads)
    model = args.model or _default_model()
    tokenizer = AutoTokenizer.from_pretrained(model)
    ensure_tool_template(tokenizer, model, "hermes")
    prompts = [prompt for prompt in shop_prompts(tokenizer, args.episodes) for _ in range(args.samples)]
    eos = tokenizer.eos_token_id

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ctranslate2.converters.TransformersConverter(model).convert(f"{tmp}/ct2", quantization="float32", force=True)
        convert_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ct2 = ctranslate2.Generator(f"{tmp}/ct2", device="cpu", compute_type="float32", inter_threads=1,
                                    intra_threads=args.threads)
        load_s = time.perf_counter() - t0
        ours = model_generator(model, dtype="float32", fallback_eos=eos, pad_id=tokenizer.pad_token_id)

        def run_ours() -> list[list[int]]:
            ours.clear()  # each repeat prefills like a new step's first requests
            out = ours.generate(prompts, [args.max_tokens] * len(prompts), Sampling())
            return [[t for t in g.tokens if t != eos] for g in out]

        def run_ct2() -> list[list[int]]:
            tokens = [tokenizer.convert_ids_to_tokens(prompt) for prompt in prompts]
            out = ct2.generate_batch(tokens, max_length=args.max_tokens, sampling_topk=1, beam_size=1,
                                     include_prompt_in_result=False, end_token=tokenizer.eos_token)
            return [[t for t in r.sequences_ids[0] if t != eos] for r in out]

        times: dict[str, list[float]] = {"transformers_batched": [], "ctranslate2": []}
        outputs: dict[str, list[list[int]]] = {}
        for _ in range(args.repeats):
            for name, run in (("transformers_batched", run_ours), ("ctranslate2", run_ct2)):
                t0 = time.perf_counter()
                outputs[name] = run()
                times[name].append(round(time.perf_counter() - t0, 2))
                print(f"{name}: {times[name][-1]} s", flush=True)

    a, b = outputs["transformers_batched"], outputs["ctranslate2"]
    same = sum(x == y for x, y in zip(a, b))
    shared = [common_prefix(x, y) for x, y in zip(a, b)]
    medians = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "model": Path(model).name, "requests": len(prompts), "prompt_tokens": [len(p) for p in prompts[:: args.samples]],
        "max_new_tokens": args.max_tokens, "threads": args.threads, "wall_s": times,
        "generated_tokens": {name: sum(map(len, out)) for name, out in outputs.items()},
        "median_s": medians, "speedup_ct2": round(medians["transformers_batched"] / medians["ctranslate2"], 2),
        "ct2_convert_s": round(convert_s, 2), "ct2_load_s": round(load_s, 2),
        "identical_outputs": f"{same}/{len(prompts)}", "mean_common_prefix_tokens": round(statistics.mean(shared), 1),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _default_model() -> str:
    from seal_trainer.models import SMOLLM2, resolve_model

    return str(resolve_model(SMOLLM2))


if __name__ == "__main__":
    raise SystemExit(main())
