"""Where a CPU GRPO step's time goes, before and after SEAL's CPU cuts, side by side in one invocation.

    python benchmarks/step_split.py --before-tree DIR [--model PATH] [--prompts 2 --samples 8] [--out ...json]
    python benchmarks/step_split.py --before-env SEAL_COMPUTE_DTYPE=float32 --model PATH   # fp32 vs the CPU's bf16

Runs ``seal-train`` for one step of ``--prompts`` x ``--samples`` rollouts (default 2 x 8 = 16) twice with the
same model, tasks, batch and seed (validation off):

- ``before``: the code of ``--before-tree`` (default: this tree), for example an older checkout of this repository
  (``git archive <commit> | tar -x -C DIR``), imported from there, with ``--before-env`` variables and
  ``--before-set`` overrides;
- ``after``: this tree (one batched, prefix-cached rollout generator; bf16 where the CPU has bf16 units), with
  ``--after-set`` overrides (for example LoRA: ``actor_rollout_ref.model.lora_rank=16``).

It prints verl's per-phase timers (``timing_s/*``), the wall time and the peak memory of each run (the whole
process tree: trainer, Ray workers, rollout server; resident sets added up, and proportional set sizes, which
count a page shared by several processes once), the rollouts per step and the cost per rollout, plus
the prompt length of a shop episode with the tool schemas rendered as spaced JSON and as compact JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ["gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step"]


def _peak_memory(process: subprocess.Popen, peak: dict[str, int]) -> None:
    """Sample the memory of ``process`` and all its descendants until it exits; the maxima in ``peak``: ``rss``
    (resident sets added up: each Ray worker counts the shared torch/verl pages it maps again) and ``pss``
    (proportional set size: a shared page counted once over the processes that map it, so the sum is what the
    tree takes from the machine)."""
    import psutil

    root = psutil.Process(process.pid)
    while process.poll() is None:
        rss = pss = 0
        for proc in [root, *root.children(recursive=True)]:
            try:
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            rss, pss = rss + info.rss, pss + info.pss
        peak["rss"], peak["pss"] = max(peak["rss"], rss), max(peak["pss"], pss)
        time.sleep(0.5)


def run_arm(name: str, tree: Path, overrides: list[str], workdir: Path, extra_env: dict[str, str]) -> dict:
    run_dir = workdir / name
    cmd = [sys.executable, "-m", "seal_trainer.cli", "trainer.total_training_steps=1", "trainer.val_before_train=false",
           "trainer.test_freq=-1", f"trainer.default_local_dir={run_dir}", f"trainer.experiment_name=split_{name}",
           *overrides]
    env = {**os.environ, "PYTHONPATH": str(tree), **extra_env}
    t0, peak = time.time(), {"rss": 0, "pss": 0}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir,
                          env=env) as process:
        sampler = threading.Thread(target=_peak_memory, args=(process, peak), daemon=True)
        sampler.start()
        stdout, stderr = process.communicate()
        sampler.join()
    wall = time.time() - t0
    if process.returncode != 0:
        raise SystemExit(f"{name}: seal-train failed\n{stdout[-3000:]}\n{stderr[-3000:]}")
    log = (run_dir / "train.log").read_text()
    timing = {p: float(m.group(1)) for p in PHASES
              for m in [re.search(rf"timing_s/{p}:([0-9.]+)", log)] if m}
    metrics = {k: float(m.group(1)) for k in ("prompt_length/mean", "response_length/mean", "critic/score/mean",
                                             "seal/informative_groups", "actor/update_rows", "actor/grad_norm")
               for m in [re.search(rf"{k}:([0-9.]+)", log)] if m}  # the rows a step's update computed, and why
    rollouts = sum(1 for f in (run_dir / "rollouts").glob("*.jsonl") for _ in f.open())
    step = timing.get("step")
    return {"wall_s": round(wall, 1), "timing_s": timing, "rollouts": rollouts,
            "step_s_per_rollout": round(step / rollouts, 2) if step and rollouts else None,
            "peak_rss_gb": round(peak["rss"] / 2**30, 2), "peak_pss_gb": round(peak["pss"] / 2**30, 2), **metrics}


def prompt_tokens(model: str) -> dict[str, int]:
    """Tokens of a shop episode's first prompt, tool schemas as spaced vs compact JSON."""
    import gymnasium as gym
    from transformers import AutoTokenizer

    from seal_envs.tool_template import HERMES_TOOL_TEMPLATE

    tok = AutoTokenizer.from_pretrained(model)
    env = gym.make("seal/Shop-v0", mode="eval", sandbox="inprocess")
    obs, info = env.reset(seed=0)
    env.close()
    out = {}
    for name, template in (("spaced", HERMES_TOOL_TEMPLATE.replace("tojson(separators=(',', ':'))", "tojson")),
                           ("compact", HERMES_TOOL_TEMPLATE)):
        tok.chat_template = template
        text = tok.apply_chat_template(list(obs), tools=info["tools"], tokenize=False, add_generation_prompt=True)
        out[name] = len(tok(text, add_special_tokens=False)["input_ids"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before-tree", type=Path, default=ROOT, help="an older checkout of this repository")
    p.add_argument("--before-env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable of the before arm only (repeatable)")
    p.add_argument("--before-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a seal-train override of the before arm only (repeatable)")
    p.add_argument("--after-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a seal-train override of the after arm only (repeatable)")
    p.add_argument("--model", default=None, help="default: seal-train's own (warm-started SmolLM2, cached)")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--samples", type=int, default=8, help="rollouts per prompt (GRPO group size)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "step_split.json")
    p.add_argument("--runs", type=Path, default=None, help="keep the two run folders here (default: a temp dir)")
    p.add_argument("overrides", nargs="*", help="more seal-train overrides for both arms, key=value")
    args = p.parse_args(argv)
    overrides = [f"data.train_batch_size={args.prompts}", f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
                 f"actor_rollout_ref.rollout.n={args.samples}", *args.overrides]
    model = [f"actor_rollout_ref.model.path={Path(args.model).resolve()}"] if args.model else []
    before_env = dict(kv.split("=", 1) for kv in args.before_env)
    arms = {"before": (args.before_tree.resolve(), args.before_set, before_env), "after": (ROOT, args.after_set, {})}
    if arms["before"] == arms["after"]:
        p.error("the two arms are the same: give --before-tree, --before-env, --before-set or --after-set")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = (args.runs or Path(tmp)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        results = {name: run_arm(name, tree, model + overrides + own, workdir, env)
                   for name, (tree, own, env) in arms.items()}
    from seal_trainer.models import SMOLLM2, resolve_model

    results["prompt_tokens"] = prompt_tokens(args.model or str(resolve_model(SMOLLM2)))
    print(f"{'phase (s)':16s}" + "".join(f"{a:>10s}" for a in arms) + "     ratio")
    for phase in PHASES:
        row = [results[a]["timing_s"].get(phase) for a in arms]
        ratio = f"{row[0] / row[1]:8.1f}x" if all(row) else "        -"
        print(f"{phase:16s}" + "".join(f"{v:10.1f}" if v is not None else f"{'-':>10s}" for v in row) + ratio)
    for key, label in (("wall_s", "wall (s)"), ("rollouts", "rollouts"), ("step_s_per_rollout", "step s/rollout"),
                       ("peak_rss_gb", "peak RSS (GB)"), ("peak_pss_gb", "peak PSS (GB)")):
        print(f"{label:16s}" + "".join(f"{results[a][key]:10}" for a in arms))
    print(f"shop prompt tokens: spaced JSON {results['prompt_tokens']['spaced']}, "
          f"compact {results['prompt_tokens']['compact']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "model": Path(args.model).name if args.model else "default",
           "overrides": [o.replace(str(Path.home()), "~") for o in overrides], "before_env": before_env,
           "before_set": args.before_set, "after_set": args.after_set, **results}  # no machine paths in the result file
    args.out.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
