"""The replication experiment on the tiny model: SFT checkpoint -> GRPO, vanilla vs full SEAL.

    python benchmarks/replication/sft_warm_start.py                  # once: results/models/sft
    python benchmarks/replication/run.py --seeds 0 1 2 --steps 3
    python benchmarks/replication/run.py --dry-run                   # print the seal-train commands only

The runs, their aggregation and the plot are ``benchmarks/comparison.py``'s; this script only supplies the
tiny model's setting: the SFT checkpoint as the model, the 32 synthetic ``train`` tasks as training rows
(``seal_mode=train``, from ``common.py``; since 2026-12-04 the policies are evaluated as every comparison's, on
shop's eval split and bundled tasks by ``seal_envs.evaluation.heldout``), and the budget of the 2026-12-02 runs (2 prompts x 8 rollouts at
T=0.5, lr 1e-4, KL loss 0.001, response length 1024). Other ``comparison.py`` flags (``--arms``, ``--seeds``,
``--steps``, ``--aggregate-only`` ...) pass through. Outputs: ``results/rl/`` (runs, comparison.json/png).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import comparison  # noqa: E402
from common import DOMAIN, RESULTS, task_set, task_set_path  # noqa: E402

BUDGET = ("--prompts", "2", "--rollouts", "8", "--response-budget", "1024", "--temperature", "0.5")
SETTINGS = ("actor_rollout_ref.rollout.temperature=0.5", "actor_rollout_ref.actor.optim.lr=1e-4",
            "actor_rollout_ref.actor.use_kl_loss=true", "seal.env.max_steps_per_turn=4", "seal.max_assistant_turns=8")


def write_data(out: Path) -> Path:
    from seal_trainer.data import task_rows, write_rows

    path = str(task_set_path("train").resolve())
    rows = task_rows(task_set("train"), domain=DOMAIN, mode="train", sandbox="inprocess", tasks_path=path, seed=0)
    return write_rows(rows, out / "train.parquet")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    p.add_argument("--sft", type=Path, default=RESULTS / "models" / "sft")
    args, rest = p.parse_known_args(argv)
    if not (args.sft / "config.json").exists() and "--dry-run" not in rest and "--aggregate-only" not in rest:
        raise SystemExit(f"no SFT checkpoint at {args.sft}; run benchmarks/replication/sft_warm_start.py first")
    train = write_data(RESULTS / "rl" / "data")
    return comparison.main(["--out", str(RESULTS / "rl"), "--train-file", str(train), *BUDGET,
                            "--title", "tiny Qwen2 (1M) after SFT, synthetic shop", "--steps", "3", *rest,
                            "--set", f"actor_rollout_ref.model.path={args.sft.resolve()}", *SETTINGS])


if __name__ == "__main__":
    sys.exit(main())
