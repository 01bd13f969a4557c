"""Dynamic sampling (DAPO) or a pass-rate curriculum: which buys more informative GRPO groups per CPU second?

    python benchmarks/group_signal.py [--mechanism benchmarks/results/mechanism.json]
                                      [--step-split benchmarks/results/step_split.json] [--group 4]

Replays measured outcomes, trains nothing: the warm-started policy's rollouts of ``benchmarks/mechanism.py``
(16 shop training tasks x 8 samples at the training temperature, original arm) and the per-rollout costs of
generation and update of ``benchmarks/step_split.py`` (the main job on 2 cores). For every way of splitting a
task's 8 samples into a 4-sample *history* (its previous group) and a 4-sample *current* group:

- ``uniform``: tasks drawn uniformly (verl's default); a group is informative when its rewards differ.
- ``dapo``: drawn uniformly, non-informative groups dropped before the update (``algorithm.filter_groups``):
  every group updated on is informative, the dropped ones cost their generation only.
- ``curriculum``: a task whose history passed or failed every sample is drawn with weight ``--low``, others 1.
- ``curriculum+dapo``: both.

Cost of one informative group: generation of the groups drawn per informative one, plus the update of the groups
that enter the batch (all of them, or only informative ones under DAPO). Output: ``results/group_signal.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def informative_shares(rewards: dict[str, list[float]], group: int, low: float) -> dict[str, float]:
    """Mean share of informative current groups, tasks drawn uniformly and by the curriculum's weights."""
    samples = len(next(iter(rewards.values())))
    uniform, curriculum = [], []
    for history in itertools.combinations(range(samples), samples - group):
        current = [i for i in range(samples) if i not in history]
        weights, informative = [], []
        for values in rewards.values():
            weights.append(1.0 if len({values[i] for i in history}) > 1 else low)
            informative.append(float(len({values[i] for i in current}) > 1))
        uniform.append(sum(informative) / len(informative))
        curriculum.append(sum(w * x for w, x in zip(weights, informative)) / sum(weights))
    return {"uniform": sum(uniform) / len(uniform), "curriculum": sum(curriculum) / len(curriculum)}


def cost_per_informative_group(share: float, gen: float, update: float, dapo: bool) -> float:
    return gen / share + (update if dapo else update / share)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mechanism", type=Path, default=RESULTS / "mechanism.json")
    p.add_argument("--step-split", type=Path, default=RESULTS / "step_split.json")
    p.add_argument("--group", type=int, default=4, help="GRPO group size (rollout.n of the main job)")
    p.add_argument("--low", type=float, default=0.1, help="curriculum weight of a task whose last group was uniform")
    p.add_argument("--out", type=Path, default=RESULTS / "group_signal.json")
    args = p.parse_args(argv)
    mechanism = json.loads(args.mechanism.read_text())
    rewards: dict[str, list[float]] = defaultdict(list)
    for r in mechanism["rollouts"]["original"]:
        rewards[r["task_id"]].append(float(r["reward"]))
    split = json.loads(args.step_split.read_text())["after"]
    per_rollout = {k: split["timing_s"][k] / 8 for k in ("gen", "update_actor")}  # the main job: 2 prompts x 4
    gen, update = per_rollout["gen"] * args.group, per_rollout["update_actor"] * args.group
    shares = informative_shares(rewards, args.group, args.low)
    arms = {"uniform": (shares["uniform"], False), "dapo": (shares["uniform"], True),
            "curriculum": (shares["curriculum"], False), "curriculum+dapo": (shares["curriculum"], True)}
    table = {}
    for arm, (share, dapo) in arms.items():
        cost = cost_per_informative_group(share, gen, update, dapo)
        table[arm] = {"informative_share_drawn": share, "informative_share_updated": 1.0 if dapo else share,
                      "cpu_s_per_informative_group": cost, "informative_groups_per_cpu_hour": 3600 / cost}
    doc = {"tasks": len(rewards), "samples_per_task": len(next(iter(rewards.values()))),
           "group": args.group, "low": args.low, "gen_s_per_group": gen, "update_s_per_group": update,
           "arms": table}
    print(f"{len(rewards)} tasks, G={args.group}; per group: generation {gen:.0f} s, update {update:.0f} s")
    for arm, row in table.items():
        print(f"{arm:16s} drawn groups informative {row['informative_share_drawn']:.3f}, "
              f"updated {row['informative_share_updated']:.3f}: {row['cpu_s_per_informative_group']:.0f} s "
              f"per informative group ({row['informative_groups_per_cpu_hour']:.1f} per CPU hour)")
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
