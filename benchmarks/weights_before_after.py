"""Trajectory weights per label before and after the method-fidelity change, side by side.

    python benchmarks/weights_before_after.py --before BEFORE.json --after AFTER.json [--out OUT.json]

Both files are ``benchmarks/mechanism.py`` outputs of the same model, tasks, samples and seed: BEFORE from the
code before the change (commit ebbaa21: labels only, rho keyed by our labels over the turns played, fixed rho),
AFTER from the current code (rho keyed by the paper's tags, unreached turns padded, dynamic rho). Each run
plays its own rollouts under its own env rules, so the rollouts are alike but not identical. Per label: the
rollouts that have it and their mean w, before (the old rule) and after (fixed and dynamic rho, over all
rollouts and over those in informative groups, which are the only ones with a gradient).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from seal_trainer.advantage import FIXED_RHO, in_informative_group, mean_weight_by_name, trajectory_weight

BEFORE_EXCLUDED = frozenset({"infrastructure_error", "task_error"})  # the old rule's excluded labels


def before_table(rollouts: Sequence[dict]) -> dict[str, dict]:
    """The old rule: w = clip(sum_z p(z) rho(z)) over the played turns' labels, rho = FIXED_RHO by label name."""
    weights = [trajectory_weight(r["labels"], FIXED_RHO, excluded=BEFORE_EXCLUDED) for r in rollouts]
    grad = in_informative_group([r["task_id"] for r in rollouts], [r["reward"] for r in rollouts], [True] * len(rollouts))
    names = [r["labels"] for r in rollouts]
    count = Counter(z for labels in names for z in set(labels))
    all_w = mean_weight_by_name(weights, names, range(len(rollouts)))
    grad_w = mean_weight_by_name(weights, names, [j for j in range(len(rollouts)) if grad[j]])
    return {label: {"rollouts": count[label], "w": all_w[label], "w_grad": grad_w.get(label)} for label in sorted(count)}


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--arm", default="original")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    before_doc, after_doc = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    before = before_table(before_doc["rollouts"][args.arm])
    after = after_doc["arms"][args.arm]["weights"]["labels"]
    rows = ["| label | before: rollouts | before: w | before: w (grad) | after: rollouts | after: w fixed | "
            "after: w dynamic | after: w dynamic (grad) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label in sorted(set(before) | set(after)):
        b, a = before.get(label, {}), after.get(label, {})
        rows.append(f"| {label} | {b.get('rollouts', 0)} | {fmt(b.get('w'))} | {fmt(b.get('w_grad'))} | "
                    f"{a.get('rollouts', 0)} | {fmt(a.get('w_fixed'))} | {fmt(a.get('w_dynamic'))} | "
                    f"{fmt(a.get('w_dynamic_grad'))} |")
    tags = after_doc["arms"][args.arm]["weights"]["tags"]
    rows += ["", "| tag (after) | rollouts | with gradient | w fixed | w dynamic | w dynamic (grad) |",
             "|---|---:|---:|---:|---:|---:|"]
    rows += [f"| {tag} | {t['rollouts']} | {t['with_gradient']} | {fmt(t['w_fixed'])} | {fmt(t['w_dynamic'])} | "
             f"{fmt(t['w_dynamic_grad'])} |" for tag, t in tags.items()]
    print("\n".join(rows))
    if args.out:
        Path(args.out).write_text(json.dumps({"before": before, "after": after, "after_tags": tags}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
