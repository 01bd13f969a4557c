"""The main job end to end: real verl GRPO steps of SmolLM2-135M-Instruct on CPU, tools in Docker sandboxes.

Runs ``seal-train`` (the README's main job, smaller: no warm start, 2 steps of 1 prompt x 2 rollouts, one
held-out task, responses of at most 128 tokens) and checks, from its run folder: the steps ran with SEAL's
advantage reweighting and interface evolution, the prompts carried the tool schemas (SmolLM2's own template drops
them), held-out success was measured before and after, every rollout's text was saved, and the console stayed
readable. Measured on 2 cores: about 4-5 minutes, most of it verl's and Ray's start-up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.mark.docker
def test_seal_train_smollm2_two_steps(tmp_path: Path, docker_daemon):
    run_dir = tmp_path / "run"
    env = {**os.environ, "SEAL_CACHE_DIR": os.environ.get("SEAL_CACHE_DIR", str(Path.home() / ".cache" / "seal"))}
    env.pop("SEAL_COMPUTE_DTYPE", None)  # the main job as users run it: the machine's own dtype (bf16 with bf16 units)
    cmd = [sys.executable, "-m", "seal_trainer.cli", "seal.warm_start.steps=0", "trainer.total_training_steps=2",
           "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
           "actor_rollout_ref.rollout.n=2", "data.max_response_length=128", "seal.dataset.n_val=1",
           f"trainer.default_local_dir={run_dir}", "seal.env.sandbox=docker", "trainer.experiment_name=it"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1150)
    log = run_dir / "seal_steps.jsonl"
    assert out.returncode == 0 and log.exists(), (out.stdout[-4000:] + out.stderr[-4000:])
    assert set(pd.read_parquet(run_dir / "data" / "train.parquet").seal_sandbox) == {"docker"}
    records = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [r for r in records if "validation" not in r]
    assert [s["step"] for s in steps] == [1, 2]
    weights = [w for s in steps for w in s["weights"]]
    assert all(0.5 <= w <= 2.0 for w in weights)
    assert any(abs(w - 1.0) > 1e-9 for w in weights), weights
    assert steps[-1]["interface"]["version"] > 0
    assert [r["step"] for r in records if "validation" in r] == [0, 2]  # before the first step, after the last
    # the model saw the tools: the shop prompt with its 12 schemas is over a thousand tokens
    prompt_lengths = [float(x) for x in re.findall(r"prompt_length/mean:([0-9.]+)", (run_dir / "train.log").read_text())]
    assert prompt_lengths and min(prompt_lengths) > 1000, prompt_lengths
    assert (run_dir / "training.png").stat().st_size > 10_000
    rollouts = [json.loads(line) for f in sorted((run_dir / "rollouts").glob("*.jsonl")) for line in f.open()]
    assert len(rollouts) == 4 and all("get_product" in r["input"] and r["output"] for r in rollouts)  # tools, text
    assert all(r["gts"].startswith("train_") for r in rollouts)  # each names its task (reward_model.ground_truth)
    console = out.stdout.splitlines()
    assert any(line.startswith("[seal] step 2/2") for line in console), out.stdout
    assert any("held-out success after 2 step(s)" in line for line in console), out.stdout
    assert len(console) < 25, out.stdout  # SEAL's lines only; verl's and Ray's output is in train.log
    final = run_dir / "global_step_2" / "actor" / "huggingface"  # the default saves the policy after the last step
    assert (final / "model.safetensors").exists() and any(f"final policy: {final}" in line for line in console)
