"""The replication experiment: SFT checkpoint -> GRPO, vanilla vs full SEAL, same tasks / seeds / budget.

    python benchmarks/replication/sft_warm_start.py                  # once: results/models/sft
    python benchmarks/replication/run.py --seeds 0 1 2 --steps 3 --test-freq 3
    python benchmarks/replication/run.py --dry-run                   # print the seal-train commands only

Per arm (``seal.ablation=vanilla`` and ``seal.ablation=full``, the trainer's own switches, see
``seal_trainer/config.py``) and seed, one ``seal-train`` run (``python -m seal_trainer.cli``, CPU shims) with:

- the SFT checkpoint as ``actor_rollout_ref.model.path``;
- training rows = the 32 tasks of the ``train`` set (``seal_mode=train``: the evolving interface for SEAL, the
  original one for vanilla), validation rows = the 24 ``heldout`` tasks (``seal_mode=eval``: the unchanged
  interface, greedy, ``rollout.val_kwargs`` temperature 0), both synthetic (``common.py``), written with
  ``seal_trainer.data.task_rows`` and a ``seal_tasks`` file column so the agent loop loads them;
- identical budget: ``--steps`` GRPO steps of ``--batch`` prompts x ``--n`` rollouts, same lr/KL/lengths;
- seeds: ``data.seed``, ``actor_rollout_ref.rollout.seed``, ``actor_rollout_ref.actor.fsdp_config.seed``;
- validation before training and every ``--test-freq`` steps: ``val-core/seal/shop/reward/mean@1`` (verifier
  success on the held-out tasks) from verl's ``file`` logger (``VERL_FILE_LOGGER_PATH``).

Outputs under ``results/``: ``rl_runs/<arm>_s<seed>/`` (logs, metrics JSONL, seal_steps.jsonl), ``rl_results.json``
(per run curves, per arm mean/std per step), ``rl_success.png`` (held-out success vs step, mean +- std per arm),
and a table on stdout. If the trainer fails, the script stops with the trainer's error and writes no results:
nothing is estimated or filled in.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DOMAIN, REPO, RESULTS, task_set, task_set_path, write_json  # noqa: E402

VAL_KEY = f"val-core/seal/{DOMAIN}/reward/mean@1"
TRAIN_KEYS = ("seal/reward_mean", "actor/grad_norm", "seal/w/mean", "seal/interface_version")
ARMS = ("vanilla", "full")  # the comparison; --arms also takes the paper's ablations (seal_trainer.config.ABLATIONS)


class TrainerNotReady(SystemExit):
    pass


def write_data(out: Path) -> tuple[Path, Path]:
    from seal_trainer.data import task_rows, write_rows

    files = {name: str(task_set_path(name).resolve()) for name in ("train", "heldout")}
    rows = {name: task_rows(task_set(name), domain=DOMAIN, mode="train" if name == "train" else "eval",
                            sandbox="inprocess", tasks_path=files[name], seed=0 if name == "train" else 10_000)
            for name in files}
    return write_rows(rows["train"], out / "train.parquet"), write_rows(rows["heldout"], out / "val.parquet")


def overrides(args, arm: str, seed: int, run_dir: Path, train: Path, val: Path) -> list[str]:
    return [
        f"seal.ablation={arm}",
        f"actor_rollout_ref.model.path={Path(args.sft).resolve()}",
        f"data.train_files={train.resolve()}", f"data.val_files={val.resolve()}",
        f"data.train_batch_size={args.batch}", f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.rollout.n={args.n}", f"actor_rollout_ref.rollout.temperature={args.temperature}",
        f"data.max_response_length={args.response_length}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        f"seal.env.max_steps_per_turn={args.max_steps_per_turn}",
        f"seal.max_assistant_turns={args.max_assistant_turns}",
        f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}",
        f"actor_rollout_ref.actor.fsdp_config.seed={seed}",
        f"trainer.total_training_steps={args.steps}", f"trainer.test_freq={args.test_freq}",
        "trainer.val_before_train=true", "trainer.logger=[console,file]",
        f"trainer.experiment_name={arm}_s{seed}", f"trainer.default_local_dir={run_dir.resolve()}",
        f"++seal.log_path={(run_dir / 'seal_steps.jsonl').resolve()}",
    ]


def read_curve(metrics: Path) -> tuple[dict[int, float], list[dict[str, Any]]]:
    curve: dict[int, float] = {}
    rows = []
    if not metrics.exists():
        return curve, rows
    for line in metrics.read_text().splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows.append(doc)
        data = doc.get("data", {})
        if VAL_KEY in data:
            curve[int(doc.get("step", 0))] = float(data[VAL_KEY])
    return curve, rows


def run_one(args, arm: str, seed: int, train: Path, val: Path) -> dict[str, Any]:
    run_dir = RESULTS / "rl_runs" / f"{arm}_s{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / "verl_metrics.jsonl"
    if metrics.exists():
        metrics.unlink()
    cmd = [sys.executable, "-m", "seal_trainer.cli", "--cpu", *overrides(args, arm, seed, run_dir, train, val)]
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics.resolve())}
    print(f"[run] {arm} seed {seed}: {shlex.join(cmd)}", flush=True)
    if args.dry_run:
        return {}
    t0 = time.time()
    with (run_dir / "train.log").open("w") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=args.run_timeout)
    wall = time.time() - t0
    curve, rows = read_curve(metrics)
    if proc.returncode != 0 or not curve:
        tail = (run_dir / "train.log").read_text(errors="replace").splitlines()[-25:]
        raise TrainerNotReady(
            f"seal-train did not produce validation results for {arm} seed {seed} (exit {proc.returncode}, "
            f"{wall:.0f}s, {len(curve)} validation points). The trainer (seal_trainer/) is not usable for this "
            f"experiment yet; no RL results were written. Log: {run_dir / 'train.log'}\n--- last lines ---\n"
            + "\n".join(tail))
    return {"arm": arm, "seed": seed, "wall_s": wall, **run_record(curve, rows), "run_dir": str(run_dir)}


def run_record(curve: dict[int, float], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Validation curve, per-step training figures and verl's timings of one run."""
    steps = [r for r in rows if "timing_s/step" in r.get("data", {})]
    return {"curve": {str(k): v for k, v in sorted(curve.items())},
            "train": {str(r["step"]): {k: r["data"][k] for k in TRAIN_KEYS if k in r["data"]} for r in steps},
            "timing": [{k: v for k, v in r["data"].items() if k.startswith(("timing_s/", "agent_loop/"))}
                       for r in steps]}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        steps = sorted({int(s) for r in mine for s in r["curve"]})
        per_step = {}
        for s in steps:
            vals = [r["curve"][str(s)] for r in mine if str(s) in r["curve"]]
            per_step[str(s)] = {"mean": statistics.mean(vals), "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0,
                                "min": min(vals), "max": max(vals), "n": len(vals)}
        train_steps = sorted({int(s) for r in mine for s in r.get("train", {})})
        train_reward = {}
        for s in train_steps:
            vals = [r["train"][str(s)]["seal/reward_mean"] for r in mine if "seal/reward_mean" in r["train"].get(str(s), {})]
            if vals:
                train_reward[str(s)] = {"mean": statistics.mean(vals), "std": statistics.pstdev(vals), "n": len(vals)}
        final = [r["curve"][max(r["curve"], key=int)] for r in mine]
        out[arm] = {"per_step": per_step, "train_reward": train_reward, "final_mean": statistics.mean(final) if final else None,
                    "final_std": statistics.pstdev(final) if len(final) > 1 else 0.0, "final": final,
                    "seeds": [r["seed"] for r in mine]}
    return out


def plot(agg: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, doc in agg.items():
        for axis, series in ((ax, doc["per_step"]), (ax2, doc["train_reward"])):
            steps = sorted(int(s) for s in series)
            m = [series[str(s)]["mean"] for s in steps]
            sd = [series[str(s)]["std"] for s in steps]
            axis.plot(steps, m, marker="o", label=f"{arm} (n={len(doc['seeds'])})")
            axis.fill_between(steps, [a - b for a, b in zip(m, sd)], [a + b for a, b in zip(m, sd)], alpha=0.2)
    ax.set_ylabel("held-out success (unchanged interface, greedy)")
    ax.set_title("held-out synthetic shop tasks")
    ax2.set_ylabel("training reward (sampled rollouts)")
    ax2.set_title("training tasks (each arm's own interface)")
    for axis in (ax, ax2):
        axis.set_xlabel("GRPO step")
        axis.set_ylim(-0.02, 1.02)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_table(agg: dict[str, Any]) -> None:
    steps = sorted({int(s) for d in agg.values() for s in d["per_step"]})
    print("held-out success, mean +- std over seeds")
    print("arm      " + "".join(f"step {s:<10d}" for s in steps))
    for arm, d in agg.items():
        cells = [f"{d['per_step'][str(s)]['mean']:.3f}+-{d['per_step'][str(s)]['std']:.3f}  "
                 if str(s) in d["per_step"] else "-" * 14 for s in steps]
        print(f"{arm:9s}" + "".join(cells))


def aggregate_existing(args) -> int:
    """Collect finished runs (a validation point at the last step) from ``results/rl_runs``; nothing is filled in."""
    runs, skipped = [], []
    for arm in args.arms:
        for seed in args.seeds:
            run_dir = RESULTS / "rl_runs" / f"{arm}_s{seed}"
            curve, rows = read_curve(run_dir / "verl_metrics.jsonl")
            if args.steps not in curve:
                skipped.append(f"{arm}_s{seed} ({len(curve)} validation points)")
                continue
            runs.append({"arm": arm, "seed": seed, **run_record(curve, rows), "run_dir": str(run_dir)})
    if not runs:
        raise SystemExit(f"no finished runs under {RESULTS / 'rl_runs'}; unfinished: {skipped}")
    agg = aggregate(runs)
    doc = {"settings": vars(args), "val_metric": VAL_KEY, "runs": runs, "arms": agg, "unfinished": skipped,
           "complete": not skipped}
    write_json(RESULTS / "rl_results.json", doc)
    plot(agg, RESULTS / "rl_success.png")
    print_table(agg)
    if skipped:
        print(f"NOT finished (left out): {', '.join(skipped)}")
    print(f"wrote {RESULTS / 'rl_results.json'} and {RESULTS / 'rl_success.png'}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sft", default=str(RESULTS / "models" / "sft"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    from seal_trainer.config import ABLATIONS

    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=sorted(ABLATIONS))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--test-freq", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--temperature", type=float, default=0.5, help="rollout sampling temperature (validation: greedy)")
    p.add_argument("--response-length", type=int, default=1024)
    p.add_argument("--max-steps-per-turn", type=int, default=4)
    p.add_argument("--max-assistant-turns", type=int, default=8)
    p.add_argument("--run-timeout", type=float, default=3600)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--aggregate-only", action="store_true",
                   help="no training: table/JSON/PNG from the runs already finished under results/rl_runs")
    args = p.parse_args(argv)
    if args.aggregate_only:
        return aggregate_existing(args)
    if not (Path(args.sft) / "config.json").exists() and not args.dry_run:
        raise SystemExit(f"no SFT checkpoint at {args.sft}; run benchmarks/replication/sft_warm_start.py first")
    data_dir = RESULTS / "rl_runs" / "data"
    train, val = write_data(data_dir)
    runs = []
    t0 = time.time()
    for seed in args.seeds:
        for arm in args.arms:
            r = run_one(args, arm, seed, train, val)
            if r:
                runs.append(r)
                print(f"[run] {arm} seed {seed}: curve {r['curve']} ({r['wall_s']:.0f}s)", flush=True)
                finished = {x["seed"] for x in runs}
                partial = {"settings": vars(args) | {"sft": str(args.sft)}, "val_metric": VAL_KEY, "runs": runs,
                           "complete": False, "seeds_done": sorted(finished), "wall_s": time.time() - t0}
                write_json(RESULTS / "rl_results.partial.json", partial)
    if args.dry_run:
        return 0
    agg = aggregate(runs)
    doc = {"settings": vars(args) | {"sft": str(args.sft)}, "val_metric": VAL_KEY, "runs": runs, "arms": agg,
           "complete": True, "wall_s": time.time() - t0}
    write_json(RESULTS / "rl_results.json", doc)
    plot(agg, RESULTS / "rl_success.png")
    print_table(agg)
    print(f"wrote {RESULTS / 'rl_results.json'} and {RESULTS / 'rl_success.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
