"""The CPU rollout server on one GRPO step's first requests: 2 shop prompts x 8 samples sent at once, as verl's
agent loops send them, to the server of a ``--before`` source tree (one request at a time under a lock) and to
this tree's (requests decoded together), side by side in one invocation, on the same model.

    python benchmarks/rollout_server.py --before /path/to/old/tree [--model PATH] [--max-tokens 128]

``--before``: the repository at an older commit (e.g. ``git archive <commit> | tar -x -C DIR``); its
``seal_trainer.cpu.HFRolloutServerImpl`` is imported from there in a child process. Prints the wall time of
the 16 requests per server and dtype, the CPU time the server process spent on them (less sensitive than wall
time to other work on a shared machine), the generated tokens, the peak RSS of each child, the keys/values its
prefix cache holds and its memory (PSS) after the requests, and after ``sleep()``, which verl calls between
generation and the actor update. ``--turns 2`` or more sends each sample's conversation on, as a multi-turn episode
does: its previous prompt and answer and a tool response.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, json, resource, sys, time
import gymnasium as gym
import psutil
from transformers import AutoTokenizer
from seal_envs.tool_template import chat_prompt_ids, ensure_tool_template
from seal_trainer.cpu import HFRolloutServerImpl

model, dtype = sys.argv[1], sys.argv[4]
max_tokens, samples, turns = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
tok = AutoTokenizer.from_pretrained(model)
ensure_tool_template(tok, model, "hermes")
env = gym.make("seal/Shop-v0", mode="eval", sandbox="inprocess")
prompts = []
for seed in (0, 1):
    obs, info = env.reset(seed=seed)
    prompts.append(chat_prompt_ids(tok, list(obs), info["tools"]))
env.close()
server = HFRolloutServerImpl(model, max_tokens, dtype=dtype, seed=0)
params = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_tokens": max_tokens, "logprobs": True}

def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

end = tok.convert_tokens_to_ids("<|im_end|>")
tool_turn = tok.encode("<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"status\": \"ok\"}\n</tool_response>"
                       "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)

def answered(conv, out):  # the conversation, its answer (without its end token) and a tool response
    ids = list(out.token_ids)
    return conv + (ids[:-1] if ids and ids[-1] == end else ids) + tool_turn

async def main():
    t0, c0 = time.perf_counter(), cpu_s()
    convs = {(i, s): list(p) for i, p in enumerate(prompts) for s in range(samples)}
    outs = []
    for turn in range(turns):
        outs = await asyncio.gather(*[server.generate(prompt_ids=c, sampling_params={**params,
                                                                                     "seed": 1000 * i + s + 100 * turn})
                                      for (i, s), c in convs.items()])
        convs = {key: answered(c, o) for (key, c), o in zip(convs.items(), outs)}
    return time.perf_counter() - t0, cpu_s() - c0, outs

def pss_mb():
    return psutil.Process().memory_full_info().pss // 2**20

wall, cpu, outs = asyncio.run(main())
after_requests, cache_mb = pss_mb(), server.stats()["cache_bytes"] // 2**20
asyncio.run(server.sleep())
print(json.dumps({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "requests": len(outs) * turns,
                  "cache_mb_after_requests": cache_mb,
                  "pss_mb_after_requests": after_requests, "pss_mb_after_sleep": pss_mb(),
                  "prompt_tokens": [len(p) for p in prompts],
                  "generated_tokens": sum(len(o.token_ids) for o in outs),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


def run(tree: Path, model: str, max_tokens: int, samples: int, dtype: str, turns: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(max_tokens), str(samples), dtype, str(turns)],
                         capture_output=True, text=True, env=env, cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: the rollout server failed\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the source tree of the older server")
    p.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct (seal_trainer.models, cached)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--samples", type=int, default=8, help="samples per prompt (2 prompts)")
    p.add_argument("--dtypes", default="float32", help="comma-separated dtypes of this tree's server")
    p.add_argument("--turns", type=int, default=1, help="requests per sample, each continuing its conversation")
    args = p.parse_args(argv)
    if args.model is None:
        from seal_trainer.models import SMOLLM2, resolve_model

        args.model = str(resolve_model(SMOLLM2))
    results = {"before float32": run(args.before, args.model, args.max_tokens, args.samples, "float32",
                                         args.turns)}
    for dtype in args.dtypes.split(","):
        results[f"after {dtype}"] = run(ROOT, args.model, args.max_tokens, args.samples, dtype, args.turns)
    base = results["before float32"]
    for name, r in results.items():
        print(f"{name:16s} wall {r['wall_s']:7.1f} s ({base['wall_s'] / r['wall_s']:.1f}x), CPU {r['cpu_s']:7.1f} s "
              f"({base['cpu_s'] / r['cpu_s']:.1f}x) for {r['requests']} requests ({r['generated_tokens']} tokens, "
              f"prompts {r['prompt_tokens']}), peak RSS {r['peak_rss_mb']} MB; after the requests: prefix cache "
              f"{r['cache_mb_after_requests']} MB, PSS {r['pss_mb_after_requests']} MB -> {r['pss_mb_after_sleep']} MB "
              f"after sleep()")
    return 0


if __name__ == "__main__":
    sys.exit(main())
