"""A new domain written from the docs alone validates, evaluates and trains.

The domain is docs/domains.md's own example (its ``calendar_api.py``, ``tools.json`` and ``tasks.json`` blocks,
taken from the page, so the test breaks when the page stops working), with three more tasks of the same shape
so that it has a training and a held-out split. Then: ``seal-envs validate``, ``seal-eval --domain`` with the
ground-truth replay, and one real ``seal-train`` step (the tiny model, tools in-process) on it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "domains.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def calendar(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("calendar")
    code = next(b for b in _blocks("python") if b.startswith("# calendar_api.py"))
    tools, tasks = (json.loads(b) for b in _blocks("json")[:2])
    (root / "calendar_api.py").write_text(code)
    (root / "tools.json").write_text(json.dumps(tools))
    first = tasks["tasks"][0]
    for i, (title, day) in enumerate([("review", "tue"), ("retro", "wed"), ("lunch", "mon")], start=1):
        task = json.loads(json.dumps(first))
        task["id"] = f"cal_{i}"
        task["turns"][0]["user"] = f"Put '{title}' on {day}."
        task["turns"][0]["ground_truth"][0]["arguments"] = {"title": title, "day": day}
        tasks["tasks"].append(task)
    (root / "tasks.json").write_text(json.dumps(tasks))
    return root


def test_the_docs_domain_validates(calendar):
    from seal_envs.validation import ValidationConfig, validate_domain

    report = validate_domain(str(calendar), ValidationConfig(sandbox="inprocess"))
    assert report.ok and report.tasks == 4, [str(p) for p in report.problems]


def test_the_docs_domain_evaluates(calendar, tmp_path):
    from seal_envs.evaluation.cli import main

    assert main(["--domain", str(calendar), "--sandbox", "inprocess", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    assert summary["average"] == 100.0 and summary["tasks"] == 4, summary


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_docs_domain_trains(calendar, tmp_path):
    """``seal-train`` on the new domain: a short warm start on its executed ground truth, then one GRPO step."""
    from omegaconf import OmegaConf

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "seal_trainer.cli", f"seal.domain={calendar}", "seal.model=tiny",
           "seal.warm_start.steps=3", "seal.warm_start.split=",
           "seal.env.sandbox=inprocess", "trainer.total_training_steps=1",
           "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.rollout.n=2",
           "data.max_response_length=128", "trainer.val_before_train=false", f"trainer.default_local_dir={run}",
           "trainer.experiment_name=calendar"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=850)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # the policy RL started from is the warm-started tiny model: 3 SFT steps on the domain's 4 demonstrations
    policy = Path(OmegaConf.load(run / "config.yaml").actor_rollout_ref.model.path)
    record = json.loads((policy / "warm_start.json").read_text())
    assert record["config"]["steps"] == 3 and record["domain"] == str(calendar) and record["sequences"] >= 4
    assert record["loss"][-1]["step"] == 3 and f"[seal] model: {policy}" in out.stdout
    steps = [json.loads(line) for line in (run / "seal_steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "validation" not in s] == [1]
    assert "final policy:" in out.stdout and (run / "global_step_1" / "actor" / "huggingface" / "config.json").exists()
