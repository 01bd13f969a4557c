"""A pass-rate curriculum: the training tasks on which the starting policy's samples disagree.

    python benchmarks/curriculum.py --model ~/.cache/seal/<warm start> --out benchmarks/results/curriculum
    python benchmarks/comparison.py --train-file ~/.cache/seal/curriculum/train.parquet ...

GRPO learns only from groups whose rewards differ. A task that every sample of the starting policy passes, or
that none does, gives its group zero advantage (the main job: 1 informative group in 10). This plays each task
of the domain's training split ``--samples`` times at the training temperature (and once greedily), in training
mode's original interface with in-process tools, and keeps the tasks whose sampled pass rate is strictly between
0 and 1 (difficulty filtering before RL, as in DAPO's and Polaris' data preparation). Only the training split is
read; the held-out and bundled tasks are never seen. Writes ``--out``/``pass_rates.json`` (every task's rates)
and, under ``--data`` (machine paths inside, so not among the results), ``train_tasks.json`` and ``train.parquet``
(seal-train's ``data.train_files``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="the starting policy (a Hugging Face folder)")
    p.add_argument("--domain", default="shop")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "curriculum")
    p.add_argument("--data", type=Path, default=Path.home() / ".cache" / "seal" / "curriculum")
    args = p.parse_args(argv)

    from seal_envs.evaluation.heldout import HeldoutSettings, evaluate_model
    from seal_envs.spec import load_domain
    from seal_envs.task import write_tasks
    from seal_trainer.data import task_rows, write_rows

    train = list(load_domain(args.domain).split_tasks("train"))
    settings = HeldoutSettings(samples=args.samples, temperature=args.temperature)
    result = evaluate_model(args.model, {"train": train}, settings, domain=args.domain)["sets"]["train"]
    sampled = result["sampled"]["per_task"]
    kept = [t for t in train if 0.0 < sampled[t.id] < 1.0]
    args.out.mkdir(parents=True, exist_ok=True)
    tasks_path = write_tasks(kept, args.data / "train_tasks.json").resolve()
    write_rows(task_rows(kept, domain=args.domain, mode="train", tasks_path=str(tasks_path)), args.data / "train.parquet")
    doc = {"model": args.model.name, "domain": args.domain, "samples": args.samples,
           "temperature": args.temperature, "kept": [t.id for t in kept],
           "greedy": result["greedy"]["per_task"], "sampled": sampled,
           "category": {t.id: t.category for t in train}}
    (args.out / "pass_rates.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"kept {len(kept)} of {len(train)} training tasks (sampled pass rate strictly between 0 and 1); "
          f"sampled mean {result['sampled']['mean']:.3f}, greedy mean {result['greedy']['mean']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
