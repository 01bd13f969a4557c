"""Vanilla GRPO against SEAL with learning curves: same model, tasks, prompts, steps, rollouts and seeds per arm.

    python benchmarks/comparison.py                                   # vanilla + full SEAL, seeds 0 1 2, 20 steps
    python benchmarks/comparison.py --arms vanilla full no_reweighting no_evolution fixed_rho
    python benchmarks/comparison.py --aggregate-only                  # table/JSON/PNG from what is on disk
    python benchmarks/comparison.py --dry-run                         # print the seal-train commands only
    python benchmarks/comparison.py --smoke --out /tmp/cmp            # tiny model, 2 steps: the plumbing only

Each (arm, seed) is one ``seal-train`` run of the embedded default (``seal_trainer/config/seal_cpu.yaml``:
SmolLM2-135M-Instruct after its cached warm start, shop's 32-task procedural training split, tools in Docker),
changed only by ``seal.ablation=<arm>`` (the trainer's own switches), the seeds (data order, so the prompts of
each step, rollout sampling, FSDP init; the same across arms) and the budget: ``--prompts`` x ``--rollouts``
per step (default 4 x 4 = 16) for ``--steps`` steps (default 20).

Validation does not run inside training: every run saves a verl checkpoint every ``--eval-every`` steps
(weights, optimizer and dataloader state, so a killed run resumes from it: ``trainer.resume_mode=auto``, and
a Hugging Face folder of the policy), and ``seal_envs.evaluation.heldout`` evaluates each saved policy (and the
shared starting policy once, step 0) on shop's whole ``eval`` split (24 tasks, ``heldout``) and its 36
hand-written tasks (``ood``; ``--eval-sets heldout`` leaves them out; ``--eval-sets heldout test`` adds shop's
72-task ``test`` split), greedy and ``--eval-samples`` samples
per task at the training temperature, with standard errors over tasks; ``--eval-trained`` adds the tasks the
runs train on (``trained``: the ``--train-file``'s tasks, or shop's training split), which tells learning what
was trained on from transfer.
Each evaluation is cached next to its checkpoint (``heldout/step_<N>.json``); once a finished run is evaluated
its checkpoints are removed except the final policy.

Resuming: a run folder holding ``record.json`` (written when its training and evaluation finished) is skipped
when the script starts again with the same settings; a run killed mid-way restarts from its last checkpoint
(up to ``--eval-every`` - 1 steps are redone), and evaluations already on disk are not redone.

Outputs under ``--out``: ``runs/<arm>_s<seed>/`` (seal-train's run folders), ``comparison.json``
(``runs[]`` with ``arm``, ``seed``, ``steps``, ``validation.heldout`` / ``validation.bundled``: greedy success
keyed by step, ``evaluation``: the full summaries, ``train``: per-step figures, ``train_by_task``: each training
task's reward per step; per arm the curves with
standard errors over seeds; the paired SEAL - vanilla difference by task with its 95% interval) and
``comparison.png`` (learning curves per arm with standard-error bands, training reward, informative groups).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seal_envs.evaluation.stats import detectable_difference, mean_by_task, mean_se, paired_difference  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "comparison"
SETS = {"heldout": "heldout", "bundled": "ood", "test": "test", "trained": "trained"}  # comparison.json's names -> the evaluated
# sets (seal_envs.evaluation.heldout's, and the training tasks with --eval-trained)
MODES = ("greedy", "sampled")
EVAL_SETS = ("heldout", "bundled")  # --eval-sets' default (``trained`` comes with --eval-trained)
EVAL_CHOICES = (*EVAL_SETS, "test")  # test: shop's 72-task test split, for a finer paired difference
TRAIN_KEYS = ("seal/reward_mean", "seal/informative_groups", "seal/groups", "seal/profiled_rollouts",
              "seal/w_grad/mean", "seal/interface_version", "actor/grad_norm", "timing_s/step", "timing_s/gen")
SMOKE = {"steps": 2, "eval_every": 1, "prompts": 2, "rollouts": 2, "eval_samples": 1, "eval_tasks": 2,
         "response_budget": 48, "seeds": [0]}
SMOKE_SET = ("seal.model=tiny", "seal.warm_start.steps=0", "seal.env.sandbox=inprocess", "seal.dataset.n_val=1")


def run_name(arm: str, seed: int) -> str:
    return f"{arm}_s{seed}"


def eval_steps(steps: int, every: int) -> list[int]:
    """The steps whose policy is evaluated: 0 (the shared start), every ``every`` steps, and the last."""
    return sorted({0, *range(every, steps + 1, every), steps})


def overrides(args, arm: str, seed: int, run_dir: Path) -> list[str]:
    """seal-train's overrides of one run: only the arm differs between the runs of one seed."""
    return [
        f"seal.ablation={arm}",
        *([f"data.train_files={args.train_file.resolve()}"] if args.train_file else []),
        f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}",
        f"actor_rollout_ref.actor.fsdp_config.seed={seed}",
        f"data.train_batch_size={args.prompts}", f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
        f"actor_rollout_ref.rollout.n={args.rollouts}", f"data.max_response_length={args.response_budget}",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false", "trainer.test_freq=-1",  # evaluated from the checkpoints instead
        f"trainer.save_freq={args.eval_every}", "trainer.resume_mode=auto",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        "trainer.logger=[console,file]",
        f"trainer.experiment_name={run_name(arm, seed)}", f"trainer.default_local_dir={run_dir}",
        *args.set,
    ]


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """verl's file-logger lines of every attempt of a run (verl truncates its file, so each attempt has its own)."""
    rows = []
    for path in sorted(run_dir.glob("verl_metrics_*.jsonl"), key=lambda p: int(p.stem.rsplit("_", 1)[1])):
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def train_record(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per step, the training figures (a step redone after a resume keeps its last attempt's values)."""
    train: dict[str, dict[str, Any]] = {}
    for doc in rows:
        data, step = doc.get("data", {}), str(doc.get("step", 0))
        if "timing_s/step" in data:
            train[step] = {k: float(data[k]) for k in TRAIN_KEYS if k in data}
            train[step]["labels"] = {k.rsplit("/", 1)[1]: float(v) for k, v in data.items()
                                     if k.startswith("seal/label_share/")}
    return train


def task_rewards(run_dir: Path, tasks: tuple) -> dict[str, dict[str, float]]:
    """Per step, each training task's mean reward over that step's rollouts (``rollouts/<step>.jsonl``). A rollout
    names its task in ``gts`` (the rows' ``reward_model.ground_truth``); in dumps written before the rows had one,
    it belongs to the one task whose first user message its prompt holds (tasks sharing that message stay out)."""
    firsts = {t.id: t.turns[0].user for t in tasks}
    out: dict[str, dict[str, float]] = {}
    for path in sorted((run_dir / "rollouts").glob("*.jsonl"), key=lambda f: int(f.stem)):
        scores: dict[str, list[float]] = {}
        for line in path.read_text().splitlines():
            rollout = json.loads(line)
            owners = ([rollout["gts"]] if rollout.get("gts") in firsts else
                      [i for i, text in firsts.items() if text in rollout["input"]])
            if len(owners) == 1:
                scores.setdefault(owners[0], []).append(float(rollout["score"]))
        out[path.stem] = {i: round(sum(v) / len(v), 4) for i, v in scores.items()}
    return out


def checkpoint_policy(run_dir: Path, step: int) -> Path:
    """The step's policy folder (a LoRA run's adapters merged into its weights: ``seal_trainer.checkpoint``)."""
    from seal_trainer.checkpoint import policy_folder

    actor = run_dir / f"global_step_{step}" / "actor"
    return policy_folder(actor) or actor / "huggingface"


def trained_tasks(train_file: Path | None) -> tuple:
    """The tasks a training parquet names (its rows' ``seal_task_id``, from their ``seal_tasks`` file or shop's
    training split), in order; without a file, shop's training split (seal-train's default)."""
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    split = {t.id: t for t in load_domain("shop").split_tasks("train")}
    if train_file is None:
        return tuple(split.values())
    import pandas as pd

    rows = pd.read_parquet(train_file, columns=["seal_task_id", "seal_tasks"])
    files = {f: {t.id: t for t in load_tasks(Path(f))} for f in set(rows["seal_tasks"]) if f}
    return tuple((files[f] if f else split)[i] for i, f in dict(zip(rows["seal_task_id"], rows["seal_tasks"])).items())


def _evaluate_policy(policy: Path, eval_sets: list[str], eval_tasks: int | None, samples: int, temperature: float,
                     response_budget: int, trained: tuple) -> dict[str, Any]:
    from dataclasses import replace

    from seal_envs.evaluation.heldout import HeldoutSettings, evaluate_model, evaluation_sets

    wanted = {SETS[name] for name in eval_sets}
    sets = {name: tasks[:eval_tasks] for name, tasks in
            {**evaluation_sets("shop"), **({"trained": trained} if trained else {})}.items()
            if name in wanted or name == "trained"}
    settings = HeldoutSettings(samples=samples, temperature=temperature, seed=0,
                               limits=replace(HeldoutSettings().limits, response_budget=response_budget))
    return evaluate_model(policy, sets, settings)


def evaluate(args, policy: Path, cache: Path, trained: tuple) -> dict[str, Any]:
    """The held-out evaluation of one policy (with ``--eval-trained`` also on ``trained``, the run's training tasks),
    cached at ``cache`` (a restarted script does not redo it). It runs in
    a child process: the model and its caches (about 13 GB for SmolLM2) go back to the OS before the next training
    run starts, which otherwise shares the machine with them (Ray's memory monitor killed one such run)."""
    if cache.exists():
        return json.loads(cache.read_text())
    from seal_envs.evaluation.heldout import format_result

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as child:
        result = child.submit(_evaluate_policy, policy, args.eval_sets, args.eval_tasks, args.eval_samples,
                              args.temperature, args.response_budget, trained if args.eval_trained else ()).result()
    print(f"[comparison] {policy}:\n{format_result(result)}", flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=1) + "\n")
    return result


def start_policy(run_dir: Path) -> Path:
    """The policy every run starts from: the resolved ``actor_rollout_ref.model.path`` of the run just trained
    (the same for every run; an earlier run's folder may hold only its record)."""
    import yaml

    return Path(yaml.safe_load((run_dir / "config.yaml").read_text())["actor_rollout_ref"]["model"]["path"])


def validation(evals: dict[int, dict[str, Any]]) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """comparison.json's ``validation`` (greedy success per set keyed by step) and ``evaluation`` (summaries)."""
    evaluated = {name: s for name, s in SETS.items() if any(s in doc["sets"] for doc in evals.values())}
    short = {name: {str(step): doc["sets"][s]["greedy"]["mean"] for step, doc in evals.items() if s in doc["sets"]}
             for name, s in evaluated.items()}
    full = {name: {str(step): {mode: doc["sets"][s][mode] for mode in MODES if mode in doc["sets"][s]}
                   for step, doc in evals.items() if s in doc["sets"]} for name, s in evaluated.items()}
    return short, full


def prune(run_dir: Path, steps: int) -> None:
    """After its evaluation, a finished run keeps only its final policy (a checkpoint with optimizer state is
    about 2 GB for SmolLM2-135M)."""
    for folder in run_dir.glob("global_step_*"):
        if folder.name != f"global_step_{steps}":
            shutil.rmtree(folder, ignore_errors=True)
    final = run_dir / f"global_step_{steps}" / "actor"
    for item in final.glob("*") if final.exists() else []:
        if item.name != "huggingface":
            shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink()


def finished_record(args, run_dir: Path) -> dict[str, Any] | None:
    """The record of a run that finished with these settings; a run folder that finished with other settings is
    removed (its checkpoints were pruned: nothing to resume from), so the run starts afresh."""
    done = run_dir / "record.json"
    if not done.exists():
        return None
    record = json.loads(done.read_text())
    if record.get("settings") == settings_key(args):
        return record
    print(f"[comparison] {run_dir} finished with other settings; starting it afresh", flush=True)
    shutil.rmtree(run_dir)
    return None


def run_one(args, arm: str, seed: int) -> dict[str, Any]:
    run_dir = (args.out / "runs" / run_name(arm, seed)).resolve()
    done = run_dir / "record.json"
    if not args.dry_run and (record := finished_record(args, run_dir)):
        print(f"[comparison] {arm} seed {seed}: finished earlier, reusing {done}", flush=True)
        return record
    run_dir.mkdir(parents=True, exist_ok=True)
    attempt = len(list(run_dir.glob("verl_metrics_*.jsonl")))
    cmd = [sys.executable, "-m", "seal_trainer.cli", *overrides(args, arm, seed, run_dir)]
    print(f"[comparison] {arm} seed {seed}: {shlex.join(cmd)}", flush=True)
    if args.dry_run:
        return {}
    t0 = time.time()
    with (run_dir / f"console_{attempt}.log").open("w") as log:
        proc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=args.run_timeout,
                              env={**os.environ, "VERL_FILE_LOGGER_PATH": str(run_dir / f"verl_metrics_{attempt}.jsonl")})
    train = train_record(read_metrics(run_dir))
    if proc.returncode != 0 or not checkpoint_policy(run_dir, args.steps).exists():
        tail = "\n".join((run_dir / f"console_{attempt}.log").read_text(errors="replace").splitlines()[-25:])
        raise SystemExit(f"seal-train failed for {arm} seed {seed} (exit {proc.returncode}); restart the script to "
                         f"resume it from its last checkpoint. Logs: {run_dir}\n{tail}")
    train_s = time.time() - t0
    trained = trained_tasks(args.train_file)
    evals = {0: evaluate(args, start_policy(run_dir), args.out / "heldout" / "step_0.json", trained)}
    for step in eval_steps(args.steps, args.eval_every)[1:]:
        evals[step] = evaluate(args, checkpoint_policy(run_dir, step), run_dir / "heldout" / f"step_{step}.json",
                               trained)
    prune(run_dir, args.steps)
    short, full = validation(evals)
    result = {"arm": arm, "seed": seed, "steps": args.steps, "settings": settings_key(args),
              "attempts": attempt + 1,  # train_s and wall_s are the last attempt's
              "train_s": round(train_s, 1), "wall_s": round(time.time() - t0, 1),
              "run_dir": str(run_dir.relative_to(args.out.resolve())),
              "validation": short, "evaluation": full, "train": train,
              "train_by_task": task_rewards(run_dir, trained)}
    done.write_text(json.dumps(result, indent=1) + "\n")
    return result


def settings_key(args) -> dict[str, Any]:
    """What makes two runs of one (arm, seed) the same experiment (a record with other settings is redone)."""
    keys = ("steps", "prompts", "rollouts", "eval_every", "eval_samples", "eval_tasks", "eval_trained",
            "response_budget", "set")
    train_file = str(args.train_file).replace(str(Path.home()), "~", 1) if args.train_file else None
    key = {k: getattr(args, k) for k in keys} | {"train_file": train_file}  # no machine path in results
    if sorted(args.eval_sets) != sorted(EVAL_SETS):  # named only when not the default: older records stay valid
        key["eval_sets"] = sorted(args.eval_sets)
    return key


# ------------------------------------------------------------------------------------------------- aggregation


def band(values: list[float]) -> dict[str, float]:
    """Mean over seeds and its standard error (0 for one seed)."""
    return {k: v for k, v in mean_se(values).items()}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: success curves per set and mode (mean, se over seeds); training reward and informative groups per
    step; and the paired SEAL - vanilla difference at the last evaluated step."""
    arms: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        curves: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
        for name in SETS:
            for mode in MODES:
                steps = sorted({int(s) for r in mine for s, doc in r["evaluation"].get(name, {}).items()
                                if mode in doc})
                curves.setdefault(name, {})[mode] = {
                    str(s): band([r["evaluation"][name][str(s)][mode]["mean"] for r in mine
                                  if mode in r["evaluation"].get(name, {}).get(str(s), {})]) for s in steps}
        steps = sorted({int(s) for r in mine for s in r["train"]})
        per_step = {}
        for s in steps:
            rows = [r["train"][str(s)] for r in mine if str(s) in r["train"]]
            informative = [x["seal/informative_groups"] / x["seal/groups"] for x in rows if x.get("seal/groups")]
            per_step[str(s)] = {"reward": band([x.get("seal/reward_mean", 0.0) for x in rows]),
                                "informative_share": band(informative) if informative else None,
                                "informative_groups": sum(x.get("seal/informative_groups", 0.0) for x in rows),
                                "groups": sum(x.get("seal/groups", 0.0) for x in rows),
                                "step_s": band([x["timing_s/step"] for x in rows if "timing_s/step" in x])}
        arms[arm] = {"seeds": [r["seed"] for r in mine], "curves": curves, "per_step": per_step}
    return {"arms": arms, "paired": paired_vs_vanilla(runs)}


def per_task_rates(runs: list[dict[str, Any]], name: str, mode: str, step: str) -> dict[str, float]:
    """Per task, its pass rate averaged over the runs' seeds (the unit of the paired comparison is the task)."""
    tables = [r["evaluation"][name][step][mode]["per_task"] for r in runs
              if mode in r["evaluation"].get(name, {}).get(step, {})]
    return mean_by_task(tables)


def paired_vs_vanilla(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every other arm minus vanilla at the last step both evaluated, paired by task (pass rates averaged over
    seeds), with the 95% interval and the difference such a test would detect with 80% power."""
    base = [r for r in runs if r["arm"] == "vanilla"]
    out: dict[str, Any] = {}
    for arm in dict.fromkeys(r["arm"] for r in runs if r["arm"] != "vanilla"):
        mine = [r for r in runs if r["arm"] == arm]
        if not base or not mine:
            continue
        step = str(min(max(int(s) for s in r["evaluation"]["heldout"]) for r in base + mine))
        for name in SETS:
            for mode in MODES:
                a, b = per_task_rates(mine, name, mode, step), per_task_rates(base, name, mode, step)
                if a and b:
                    d = paired_difference(a, b)
                    d["detectable"] = detectable_difference(d["se"])
                    out.setdefault(arm, {}).setdefault(name, {})[mode] = {"step": int(step), **d}
    return out


def plot(agg: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = [n for n in SETS if any(doc["curves"][n][m] for doc in agg["arms"].values() for m in MODES)]
    fig, axes = plt.subplots(1, len(names) + 2, figsize=(5 * (len(names) + 2), 4.4))
    for i, (arm, doc) in enumerate(agg["arms"].items()):
        color = f"C{i}"
        for ax, name in zip(axes, names):
            for mode, style in zip(MODES, ("-", "--")):
                curve = doc["curves"][name].get(mode) or {}
                if not curve:
                    continue
                xs = [int(s) for s in curve]
                ys = [c["mean"] for c in curve.values()]
                se = [c["se"] for c in curve.values()]
                ax.plot(xs, ys, style, marker="o", color=color, label=f"{arm} {mode} ({len(doc['seeds'])} seeds)")
                ax.fill_between(xs, [y - e for y, e in zip(ys, se)], [y + e for y, e in zip(ys, se)], color=color,
                                alpha=0.15)
        steps = [int(s) for s in doc["per_step"]]
        for ax, key in ((axes[-2], "reward"), (axes[-1], "informative_share")):
            pts = [(s, p[key]) for s, p in zip(steps, doc["per_step"].values()) if p[key]]
            if pts:
                xs, ys, se = [s for s, _ in pts], [c["mean"] for _, c in pts], [c["se"] for _, c in pts]
                ax.plot(xs, ys, marker=".", color=color, label=arm)
                ax.fill_between(xs, [y - e for y, e in zip(ys, se)], [y + e for y, e in zip(ys, se)], color=color,
                                alpha=0.15)
    set_titles = {"heldout": "held-out: shop eval split", "bundled": "OOD: bundled hand-written shop tasks",
                  "test": "held-out: shop test split (72 tasks)", "trained": "the training tasks (eval mode)"}
    titles = (*(set_titles[n] for n in names), "training reward (mean over the step's rollouts)",
              "GRPO groups with non-zero advantage (share)")
    for ax, text in zip(axes, titles):
        ax.set_title(text, fontsize=10)
        ax.set_xlabel("GRPO step")
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    axes[0].set_ylabel("success (mean over seeds, band: +- se)")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def table(agg: dict[str, Any]) -> str:
    lines = [f"{'arm':16s}{'set':9s}{'mode':9s}  success by step: mean +- se over seeds"]
    for arm, doc in agg["arms"].items():
        for name in SETS:
            for mode in MODES:
                curve = doc["curves"][name].get(mode) or {}
                if not curve:
                    continue
                cells = "  ".join(f"{s}: {c['mean']:.3f}+-{c['se']:.3f}" for s, c in curve.items())
                lines.append(f"{arm:16s}{name:9s}{mode:9s}  {cells}")
    lines.append("paired by task (pass rates averaged over seeds), arm minus vanilla at the last evaluated step:")
    for arm, sets in agg["paired"].items():
        for name, modes in sets.items():
            for mode, d in modes.items():
                lines.append(f"  {arm} - vanilla, {name} {mode}, step {d['step']}: {d['diff']:+.3f} "
                             f"(95% CI {d['ci'][0]:+.3f} .. {d['ci'][1]:+.3f}, {d['n']} tasks, better on {d['better']}, "
                             f"worse on {d['worse']}); detectable with 80% power: {d['detectable']:.3f}")
    return "\n".join(lines)


def finish(args, runs: list[dict[str, Any]], wall: float | None) -> dict[str, Any]:
    agg = aggregate(runs)
    settings = {k: str(v).replace(str(Path.home()), "~", 1) if isinstance(v, Path) else v  # no machine path
                for k, v in vars(args).items()}
    doc = {"date": time.strftime("%Y-%m-%d"), "settings": settings, "runs": runs, **agg, "wall_s": wall}
    (args.out / "comparison.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(agg, args.out / "comparison.png", f"{args.title}: {' vs '.join(agg['arms'])}, {args.steps} GRPO steps x "
         f"{args.prompts * args.rollouts} rollouts, {time.strftime('%Y-%m-%d')}")
    print(table(agg))
    print(f"wrote {args.out / 'comparison.json'} and {args.out / 'comparison.png'}")
    return doc


def parse(argv: list[str] | None) -> argparse.Namespace:
    from seal_trainer.config import ABLATIONS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=["vanilla", "full"], choices=sorted(ABLATIONS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=20, help="GRPO steps per run")
    p.add_argument("--prompts", type=int, default=4, help="prompts (GRPO groups) per step")
    p.add_argument("--rollouts", type=int, default=4, help="rollouts per prompt (group size)")
    p.add_argument("--eval-every", type=int, default=5, help="checkpoint and evaluate every N steps")
    p.add_argument("--eval-sets", nargs="+", default=list(EVAL_SETS), choices=EVAL_CHOICES,
                   help="the evaluated sets: shop's eval split, its bundled hand-written tasks (OOD), its test split")
    p.add_argument("--eval-samples", type=int, default=4, help="sampled episodes per task, besides the greedy one")
    p.add_argument("--eval-tasks", type=int, default=None, help="the first N tasks of each set (default: all)")
    p.add_argument("--eval-trained", action="store_true",
                   help="also evaluate on the training tasks (the --train-file's, or shop's training split)")
    p.add_argument("--temperature", type=float, default=0.7, help="of the sampled evaluation (training's)")
    p.add_argument("--response-budget", type=int, default=1024, help="data.max_response_length, also in evaluation")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more seal-train overrides, every run")
    p.add_argument("--train-file", type=Path, help="training parquet (default: seal-train's, shop's train split)")
    p.add_argument("--title", default="SmolLM2-135M warm-started, shop", help="the plot's title")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--run-timeout", type=float, default=12 * 3600)
    p.add_argument("--smoke", action="store_true", help="tiny model, 2 steps, 1 seed, 2 tasks per set: plumbing")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--aggregate-only", action="store_true", help="no training: results of the finished runs")
    args = p.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
        args.set = [*SMOKE_SET, *args.set]
        args.title = "smoke: tiny random Qwen2 (learns nothing)"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.aggregate_only:
        runs = [json.loads(path.read_text()) for a in args.arms for s in args.seeds
                if (path := args.out / "runs" / run_name(a, s) / "record.json").exists()]
        finish(args, runs, None)
        return 0
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    for seed in args.seeds:
        for arm in args.arms:
            run = run_one(args, arm, seed)
            if run:
                runs.append(run)
                print(f"[comparison] {arm} seed {seed}: {run['wall_s']:.0f} s, "
                      + ", ".join(f"{name} {greedy}" for name, greedy in run["validation"].items()), flush=True)
    if not args.dry_run:
        finish(args, runs, round(time.time() - t0, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
