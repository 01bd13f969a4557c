"""A pass-rate curriculum: the training tasks on which the starting policy's samples disagree.

    python benchmarks/curriculum.py --model ~/.cache/seal/<warm start> --out benchmarks/results/curriculum
    python benchmarks/curriculum.py --from-rates benchmarks/results/curriculum/pass_rates.json   # same tasks, no play
    python benchmarks/comparison.py --train-file ~/.cache/seal/curriculum/train.parquet ...

GRPO learns only from groups whose rewards differ. A task that every sample of the starting policy passes, or
that none does, gives its group zero advantage (the main job: 1 informative group in 10). This plays each task
of the domain's training split ``--samples`` times at the training temperature (and once greedily), in training
mode's original interface with in-process tools, and keeps the tasks whose sampled pass rate is strictly between
0 and 1 (difficulty filtering before RL, as in DAPO's and Polaris' data preparation). Only the training split is
read; the held-out and bundled tasks are never seen. Writes ``--out``/``pass_rates.json`` (every task's rates)
and, under ``--data`` (machine paths inside, so not among the results), ``train_tasks.json`` and ``train.parquet``
(seal-train's ``data.train_files``). ``--from-rates`` writes those two files from an earlier run's kept tasks,
so a fresh machine trains on the committed curriculum without replaying it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _write_data(kept: list, domain: str, data: Path) -> None:
    from seal_envs.task import write_tasks
    from seal_trainer.data import task_rows, write_rows

    tasks_path = write_tasks(kept, data / "train_tasks.json").resolve()
    write_rows(task_rows(kept, domain=domain, mode="train", tasks_path=str(tasks_path)), data / "train.parquet")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="the starting policy (a Hugging Face folder)")
    source.add_argument("--from-rates", type=Path, help="an earlier run's pass_rates.json: write its kept tasks")
    p.add_argument("--domain", default="shop")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "curriculum")
    p.add_argument("--data", type=Path, default=Path.home() / ".cache" / "seal" / "curriculum")
    args = p.parse_args(argv)

    from seal_envs.evaluation.heldout import HeldoutSettings, evaluate_model
    from seal_envs.spec import load_domain

    if args.from_rates:
        doc = json.loads(args.from_rates.read_text())
        by_id = {t.id: t for t in load_domain(doc["domain"]).split_tasks("train")}
        missing = [i for i in doc["kept"] if i not in by_id]
        if missing:
            raise SystemExit(f"{args.from_rates}: tasks {missing} are not in {doc['domain']}'s training split")
        kept = [by_id[i] for i in doc["kept"]]
        _write_data(kept, doc["domain"], args.data)
        print(f"wrote {len(kept)} training tasks of {args.from_rates} to {args.data}")
        return 0
    train = list(load_domain(args.domain).split_tasks("train"))
    settings = HeldoutSettings(samples=args.samples, temperature=args.temperature)
    result = evaluate_model(args.model, {"train": train}, settings, domain=args.domain)["sets"]["train"]
    sampled = result["sampled"]["per_task"]
    kept = [t for t in train if 0.0 < sampled[t.id] < 1.0]
    args.out.mkdir(parents=True, exist_ok=True)
    _write_data(kept, args.domain, args.data)
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
