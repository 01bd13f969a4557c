"""Vanilla GRPO against SEAL on the embedded default: same model, tasks, steps, rollouts and seeds per arm.

    python benchmarks/comparison.py                                   # vanilla + full SEAL, seeds 0 1 2, 2 steps
    python benchmarks/comparison.py --arms vanilla full no_reweighting --seeds 0 1 2 3
    python benchmarks/comparison.py --aggregate-only                  # table/JSON/PNG from finished runs
    python benchmarks/comparison.py --dry-run                         # print the seal-train commands only
    python benchmarks/comparison.py --train-file T --val-file V --set actor_rollout_ref.model.path=M ...

Each (arm, seed) is one ``seal-train`` run of the embedded default (``seal_trainer/config/seal_cpu.yaml``:
SmolLM2-135M-Instruct after its cached warm start, shop's procedural training split, tools in Docker), changed
only by ``seal.ablation=<arm>`` (the trainer's own switches, ``seal_trainer/config.py``), the seeds (data order,
rollout sampling, FSDP init) and the validation set, which holds two data sources scored separately by verl:

- ``seal/shop``: the held-out procedural tasks of the main job (shop's ``eval`` split, ``seal.dataset.n_val``);
- ``seal/shop-bundled``: ``--bundled`` hand-written shop tasks (``tool_specs/shop/tasks.json``, spread over the
  categories), out of the training distribution.

Validation is eval mode (original interface) and greedy, so it is a function of the weights only: it runs for
every run after its last step, and before the first step once (the first run), since every run starts from the
same weights. Per step the runs also record the training reward, the share of GRPO groups whose rewards differ
(``seal/informative_groups``: the only groups that move the policy), weights and the interface version.

Outputs under ``--out``: ``runs/<arm>_s<seed>/`` (seal-train's run folders: train.log, seal_steps.jsonl, verl
metrics, rollouts), ``comparison.json`` and ``comparison.png`` (held-out and bundled success against steps, per
arm, mean and spread over seeds; informative groups per step). Runs whose trainer fails stop the script with the
trainer's log tail; nothing is estimated or filled in. A run folder holding ``record.json`` (written when its
run finished) is reused when the script is started again with the same ``--steps``. ``--train-file``/``--val-file`` and ``--set`` run the same
experiment on other data and settings (``benchmarks/replication/run.py``: the tiny model).
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

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "comparison"
SOURCES = {"heldout": "seal/shop", "bundled": "seal/shop-bundled"}
TRAIN_KEYS = ("seal/reward_mean", "seal/informative_groups", "seal/groups", "seal/w_grad/mean", "seal/interface_version",
              "actor/grad_norm", "timing_s/step")


def write_data(out: Path, n_bundled: int) -> tuple[Path, Path]:
    """The main job's train/val files, plus ``n_bundled`` hand-written tasks as a second validation source."""
    import pandas as pd

    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks
    from seal_trainer.data import split_tasks, task_rows, write_domain_dataset, write_rows

    train, val = write_domain_dataset("shop", out, n_val=12, sandbox="docker")
    bundled_file = load_domain("shop").root / "tasks.json"
    bundled = split_tasks(load_tasks(bundled_file), n_bundled, None)[0] if n_bundled else []
    rows = task_rows(bundled, domain="shop", mode="eval", sandbox="docker", tasks_path=str(bundled_file), seed=20_000)
    for row in rows:
        row["data_source"] = SOURCES["bundled"]
    combined = pd.concat([pd.read_parquet(val), pd.DataFrame(rows)], ignore_index=True)
    return train, write_rows(combined.to_dict("records"), out / "val_with_bundled.parquet")


def overrides(args, arm: str, seed: int, run_dir: Path, train: Path, val: Path, validate_first: bool) -> list[str]:
    return [
        f"seal.ablation={arm}",
        f"data.train_files={train}", f"data.val_files={val}",
        f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}",
        f"actor_rollout_ref.actor.fsdp_config.seed={seed}",
        f"trainer.total_training_steps={args.steps}",
        f"trainer.val_before_train={str(validate_first).lower()}", "trainer.logger=[console,file]",
        f"trainer.experiment_name={arm}_s{seed}", f"trainer.default_local_dir={run_dir}",
        *args.set,
    ]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def run_record(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Validation per source and step, per-step training figures and label shares of one run."""
    validation: dict[str, dict[str, float]] = {name: {} for name in SOURCES}
    train: dict[str, dict[str, float]] = {}
    for doc in rows:
        data, step = doc.get("data", {}), str(doc.get("step", 0))
        for name, source in SOURCES.items():
            key = f"val-core/{source}/reward/mean@1"
            if key in data:
                validation[name][step] = float(data[key])
        if "timing_s/step" in data:
            train[step] = {k: float(data[k]) for k in TRAIN_KEYS if k in data}
            train[step]["labels"] = {k.rsplit("/", 1)[1]: float(v) for k, v in data.items()
                                     if k.startswith("seal/label_share/")}
    return {"validation": validation, "train": train}


def run_one(args, arm: str, seed: int, train: Path, val: Path, validate_first: bool) -> dict[str, Any]:
    run_dir = (args.out / "runs" / f"{arm}_s{seed}").resolve()
    done = run_dir / "record.json"
    if done.exists() and not args.dry_run:  # finished earlier (the script was stopped): reused, not rerun
        record = json.loads(done.read_text())
        if record.get("steps") == args.steps:
            print(f"[comparison] {arm} seed {seed}: finished earlier, reusing {done}", flush=True)
            return record
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / "verl_metrics.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "seal_trainer.cli",
           *overrides(args, arm, seed, run_dir, train.resolve(), val.resolve(), validate_first)]
    print(f"[comparison] {arm} seed {seed}: {shlex.join(cmd)}", flush=True)
    if args.dry_run:
        return {}
    t0 = time.time()
    with (run_dir / "console.log").open("w") as log:
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics)},
                              stdout=log, stderr=subprocess.STDOUT, timeout=args.run_timeout)
    record = run_record(read_metrics(metrics))
    if proc.returncode != 0 or str(args.steps) not in record["validation"]["heldout"]:
        tail = "\n".join((run_dir / "console.log").read_text(errors="replace").splitlines()[-25:])
        raise SystemExit(f"seal-train failed for {arm} seed {seed} (exit {proc.returncode}); no results written. "
                         f"Logs: {run_dir}\n{tail}")
    result = {"arm": arm, "seed": seed, "steps": args.steps, "wall_s": round(time.time() - t0, 1),
              "run_dir": str(run_dir.relative_to(args.out.resolve())), **record}
    done.write_text(json.dumps(result, indent=1) + "\n")
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.mean(values), "std": statistics.pstdev(values), "min": min(values),
            "max": max(values), "n": len(values)}


def aggregate(runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Per arm: success per source at step 0 (shared start) and after the last step; training figures per step."""
    start = {name: next((r["validation"][name]["0"] for r in runs if "0" in r["validation"][name]), None)
             for name in SOURCES}
    arms: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        final = {name: spread([r["validation"][name][str(steps)] for r in mine]) for name in SOURCES
                 if all(str(steps) in r["validation"][name] for r in mine)}
        per_step = {}
        for s in range(1, steps + 1):
            rows = [r["train"][str(s)] for r in mine if str(s) in r["train"]]
            per_step[str(s)] = {
                "reward": spread([x.get("seal/reward_mean", 0.0) for x in rows]),
                "informative_groups": sum(x.get("seal/informative_groups", 0.0) for x in rows),
                "groups": sum(x.get("seal/groups", 0.0) for x in rows),
                "interface_version": [x.get("seal/interface_version") for x in rows],
                "w_mean": [x.get("seal/w_grad/mean") for x in rows],
            }
        arms[arm] = {"seeds": [r["seed"] for r in mine], "final": final, "per_step": per_step}
    return {"start": start, "arms": arms}


def plot(agg: dict[str, Any], steps: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    arms = list(agg["arms"])
    for i, arm in enumerate(arms):
        doc = agg["arms"][arm]
        dx = (i - (len(arms) - 1) / 2) * 0.06  # arms side by side where their points coincide
        for ax, name in zip(axes[:2], SOURCES):
            if agg["start"][name] is None or name not in doc["final"]:
                continue
            f = doc["final"][name]
            ax.errorbar([0 + dx, steps + dx], [agg["start"][name], f["mean"]], yerr=[0, f["std"]], marker="o",
                        capsize=4, label=f"{arm} ({f['n']} seeds)")
        xs = [int(s) for s in doc["per_step"]]
        share = [p["informative_groups"] / p["groups"] if p["groups"] else 0.0 for p in doc["per_step"].values()]
        axes[2].bar([x + (i - (len(arms) - 1) / 2) * 0.8 / len(arms) for x in xs], share, width=0.8 / len(arms),
                    label=arm)
    for ax, name in zip(axes[:2], SOURCES):
        ax.set_title(f"{name} shop tasks (eval mode, greedy)")
        ax.set_ylabel("task success")
    axes[2].set_title("training groups with non-zero advantage")
    axes[2].set_ylabel("share of GRPO groups (all seeds)")
    for ax in axes:
        ax.set_xlabel("GRPO step")
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def print_table(agg: dict[str, Any], steps: int) -> None:
    start = agg["start"]
    print(f"task success, step 0 (shared start): held-out {start['heldout']}, bundled {start['bundled']}")
    print(f"{'arm':16s}{'held-out step ' + str(steps):>22s}{'bundled step ' + str(steps):>22s}  "
          "informative groups per step | train reward per step")
    for arm, doc in agg["arms"].items():
        cells = [f"{doc['final'][n]['mean']:.3f} +- {doc['final'][n]['std']:.3f}".rjust(22) if n in doc["final"]
                 else "-".rjust(22) for n in SOURCES]
        groups = " ".join(f"{p['informative_groups']:.0f}/{p['groups']:.0f}" for p in doc["per_step"].values())
        reward = " ".join(f"{p['reward']['mean']:.3f}" for p in doc["per_step"].values())
        print(f"{arm:16s}{''.join(cells)}  {groups} | {reward}")


def finish(args, runs: list[dict[str, Any]], wall: float | None) -> None:
    agg = aggregate(runs, args.steps)
    settings = {k: v.name if isinstance(v, Path) else v for k, v in vars(args).items()}  # no machine paths
    doc = {"date": time.strftime("%Y-%m-%d"), "settings": settings, "runs": runs, **agg, "wall_s": wall}
    (args.out / "comparison.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(agg, args.steps, args.out / "comparison.png",
         f"{args.title}: {' vs '.join(agg['arms'])}, {args.steps} GRPO steps, {time.strftime('%Y-%m-%d')}")
    print_table(agg, args.steps)
    print(f"wrote {args.out / 'comparison.json'} and {args.out / 'comparison.png'}")


def main(argv: list[str] | None = None) -> int:
    from seal_trainer.config import ABLATIONS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=["vanilla", "full"], choices=sorted(ABLATIONS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=2, help="GRPO steps per run (main job's batch: 2 prompts x 4)")
    p.add_argument("--bundled", type=int, default=6, help="hand-written shop tasks validated as the OOD check")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more seal-train overrides, every run")
    p.add_argument("--train-file", type=Path, help="training parquet (default: the main job's, see write_data)")
    p.add_argument("--val-file", type=Path, help="validation parquet (default: held-out + bundled, see write_data)")
    p.add_argument("--title", default="SmolLM2-135M warm-started, shop", help="the plot's title")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--run-timeout", type=float, default=3600)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--aggregate-only", action="store_true", help="no training: results of the finished runs")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.aggregate_only:
        runs = [{"arm": a, "seed": s, "run_dir": str(d.relative_to(args.out)),
                 **run_record(read_metrics(d / "verl_metrics.jsonl"))}
                for a in args.arms for s in args.seeds if (d := args.out / "runs" / f"{a}_s{s}").exists()]
        finish(args, [r for r in runs if str(args.steps) in r["validation"]["heldout"]], None)
        return 0
    if (args.train_file is None) != (args.val_file is None):
        raise SystemExit("--train-file and --val-file go together")
    train, val = (args.train_file, args.val_file) if args.train_file else write_data(args.out / "data", args.bundled)
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    for seed in args.seeds:
        for arm in args.arms:
            run = run_one(args, arm, seed, train, val, validate_first=not runs)
            if run:
                runs.append(run)
                print(f"[comparison] {arm} seed {seed}: {run['wall_s']:.0f} s, held-out {run['validation']['heldout']}"
                      f", bundled {run['validation']['bundled']}", flush=True)
                (args.out / "comparison.partial.json").write_text(json.dumps(runs, indent=1) + "\n")
    if not args.dry_run:
        finish(args, runs, round(time.time() - t0, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
