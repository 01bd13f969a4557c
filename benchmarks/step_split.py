"""Where a CPU GRPO step's time goes, before and after SEAL's CPU cuts, side by side in one invocation.

    python benchmarks/step_split.py [--model PATH] [--out benchmarks/results/step_split.json]

Runs ``seal-train`` for one step twice with the same model, tasks, batch and seed (validation off):

- ``before``: the previous CPU defaults: every rollout request prefills its whole prompt
  (``rollout.enable_prefix_caching=false``), old log-probs recomputed by the actor
  (``rollout_correction.bypass_mode=false``), a KL loss with its reference forward (``use_kl_loss=true``);
- ``after``: today's defaults (prefix cache in the CPU rollout server, rollout log-probs reused on-policy,
  no reference model).

It prints verl's per-phase timers (``timing_s/*``) and the wall time of each run, plus the prompt length of
a shop episode with the tool schemas rendered as spaced JSON (the template before) and as compact JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = {
    "before": ["actor_rollout_ref.rollout.enable_prefix_caching=false",
               "algorithm.rollout_correction.bypass_mode=false", "actor_rollout_ref.actor.use_kl_loss=true"],
    "after": [],
}
PHASES = ["gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step"]


def run_arm(name: str, extra: list[str], model: str | None, workdir: Path) -> dict:
    run_dir = workdir / name
    cmd = [sys.executable, "-m", "seal_trainer.cli", "trainer.total_training_steps=1", "trainer.val_before_train=false",
           "trainer.test_freq=-1", f"trainer.default_local_dir={run_dir}", f"trainer.experiment_name=split_{name}",
           *([f"actor_rollout_ref.model.path={model}"] if model else []), *extra]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if out.returncode != 0:
        raise SystemExit(f"{name}: seal-train failed\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    log = (run_dir / "train.log").read_text()
    timing = {p: float(m.group(1)) for p in PHASES
              for m in [re.search(rf"timing_s/{p}:([0-9.]+)", log)] if m}
    lengths = {k: float(m.group(1)) for k in ("prompt_length/mean", "response_length/mean")
               for m in [re.search(rf"{k}:([0-9.]+)", log)] if m}
    return {"wall_s": round(wall, 1), "timing_s": timing, **lengths}


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
    p.add_argument("--model", default=None, help="default: seal-train's own (warm-started SmolLM2, cached)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "step_split.json")
    p.add_argument("--runs", type=Path, default=None, help="keep the two run folders here (default: a temp dir)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.runs or Path(tmp)
        results = {name: run_arm(name, extra, args.model, workdir) for name, extra in ARMS.items()}
    from seal_trainer.models import SMOLLM2, resolve_model

    results["prompt_tokens"] = prompt_tokens(args.model or str(resolve_model(SMOLLM2)))
    print(f"{'phase (s)':16s}" + "".join(f"{a:>10s}" for a in ARMS) + "     ratio")
    for phase in PHASES:
        row = [results[a]["timing_s"].get(phase) for a in ARMS]
        ratio = f"{row[0] / row[1]:8.1f}x" if all(row) else "        -"
        print(f"{phase:16s}" + "".join(f"{v:10.1f}" if v is not None else f"{'-':>10s}" for v in row) + ratio)
    print(f"{'wall (s)':16s}" + "".join(f"{results[a]['wall_s']:10.1f}" for a in ARMS))
    print(f"shop prompt tokens: spaced JSON {results['prompt_tokens']['spaced']}, "
          f"compact {results['prompt_tokens']['compact']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
