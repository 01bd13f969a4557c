"""Held-out evaluation that can resolve a change: whole task sets, greedy and k samples, standard errors by task.

    python -m seal_envs.evaluation.heldout --model PATH --json out.json            # shop: eval split + bundled
    python -m seal_envs.evaluation.heldout --compare new.json old.json             # paired by task
    python -m seal_envs.evaluation.heldout --compare a_s0.json,a_s1.json b_s0.json,b_s1.json   # seeds pooled
    python -m seal_envs.evaluation.heldout --model PATH --sets test --samples 0    # shop's 72 test tasks, greedy

A domain's evaluation sets are its ``task_splits`` ``eval`` split (``heldout``: shop's 24 procedural tasks,
drawn like the training split but disjoint from it) and its hand-written ``tasks.json`` (``ood``: shop's 36
bundled tasks, out of the training distribution); where the domain declares a ``test`` split, ``test`` (shop:
72 more procedural tasks, for paired differences that 24 tasks cannot resolve). Each task is played once greedily and ``samples`` times at
the training temperature, in eval mode (the original interface), batched (``seal_envs.evaluation.batched``:
the trainer's budgets, in-process tools). Per set and mode: per-task pass rates, their mean and its standard
error over tasks (``seal_envs.evaluation.stats``). ``--compare`` gives the paired difference of two such results;
either side may be several results (comma-separated: an arm's seeds), each task's pass rate averaged over them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seal_envs.evaluation.batched import Job, Limits, play_episodes
from seal_envs.evaluation.stats import mean_by_task, mean_se, paired_difference
from seal_envs.formats import DEFAULT_TOOL_FORMAT

MODES = ("greedy", "sampled")


@dataclass(frozen=True)
class HeldoutSettings:
    """How each task is played. The defaults are seal-train's CPU config (``seal_trainer/config/seal_cpu.yaml``):
    temperature 0.7, step cap 4, response budget 1024 tokens, 8 assistant messages of at most 256 tokens."""

    samples: int = 4  # k sampled episodes per task at ``temperature`` (0: greedy only)
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 16
    max_steps_per_turn: int = 4
    limits: Limits = field(default_factory=lambda: Limits(response_budget=1024, max_assistant_turns=8,
                                                          max_new_tokens=256))
    tool_format: str = DEFAULT_TOOL_FORMAT


def evaluation_sets(domain: str = "shop") -> dict[str, tuple]:
    """``heldout``: the domain's ``eval`` split; ``ood``: its hand-written ``tasks.json``; ``test``: its ``test``
    split where it declares one (shop: 72 more procedural tasks, disjoint from every other split)."""
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    spec = load_domain(domain)
    sets = {"heldout": tuple(spec.split_tasks("eval")), "ood": tuple(load_tasks(spec.root / "tasks.json"))}
    try:
        sets["test"] = tuple(spec.split_tasks("test"))
    except ValueError:  # the domain declares no test split
        pass
    return sets


def summarize(per_task: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Per mode: mean and standard error over tasks of the per-task pass rates, and the rates themselves."""
    return {mode: {**mean_se(list(rates.values())), "per_task": dict(rates)} for mode, rates in per_task.items()}


def evaluate_model(model: str | Path, task_sets: Mapping[str, Sequence], settings: HeldoutSettings = HeldoutSettings(),
                   domain: str = "shop") -> dict[str, Any]:
    """Play every task of every set greedily and ``settings.samples`` times sampled; the per-set summaries."""
    import torch

    from seal_envs.env import ToolUseEnv
    from seal_envs.evaluation.batch_generate import Sampling, load_generator

    torch.manual_seed(settings.seed)
    tokenizer, generator = load_generator(str(model), tool_format=settings.tool_format)
    modes = {"greedy": (Sampling(temperature=0.0), 1)}
    if settings.samples > 0:
        modes["sampled"] = (Sampling(temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed),
                            settings.samples)
    result: dict[str, Any] = {"model": str(model), "settings": asdict(settings), "sets": {}}
    t0 = time.time()
    for name, tasks in task_sets.items():
        def make_env(tasks=tasks):
            return ToolUseEnv(domain, tasks=list(tasks), mode="eval", sandbox="inprocess",
                              max_steps_per_turn=settings.max_steps_per_turn, tool_format=settings.tool_format)

        rates: dict[str, dict[str, float]] = {}
        faults = 0
        for mode, (sampling, k) in modes.items():
            jobs = [Job(t.id, s) for t in tasks for s in range(k)]
            outcomes = play_episodes(make_env, jobs, tokenizer, generator, sampling, settings.batch_size,
                                     settings.limits)
            passed: dict[str, list[float]] = {t.id: [] for t in tasks}
            for o in outcomes:
                faults += o.infrastructure_error or o.task_error
                passed[o.task_id].append(float(o.reward == 1.0))
            rates[mode] = {task: sum(v) / len(v) for task, v in passed.items() if v}
        result["sets"][name] = {**summarize(rates), "tasks": len(tasks), "faults": faults}
    result["time_s"] = round(time.time() - t0, 1)
    return result


def compare(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, dict[str, dict]]:
    """``new - old`` per set and mode, paired by task (``seal_envs.evaluation.stats.paired_difference``)."""
    out: dict[str, dict[str, dict]] = {}
    for name, doc in new["sets"].items():
        if name not in old["sets"]:
            continue
        out[name] = {mode: paired_difference(doc[mode]["per_task"], old["sets"][name][mode]["per_task"])
                     for mode in MODES if mode in doc and mode in old["sets"][name]}
    return out


def pooled(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several results of the same task sets (one arm's seeds) as one: per set and mode, each task's pass rate
    averaged over them, then summarized as ``evaluate_model`` summarizes."""
    if len(results) == 1:
        return dict(results[0])
    sets: dict[str, Any] = {}
    for name, doc in results[0]["sets"].items():
        docs = [r["sets"].get(name) for r in results]
        if any(d is None for d in docs):
            continue
        rates = {}
        for mode in MODES:
            if all(mode in d for d in docs):
                tables = [d[mode]["per_task"] for d in docs]
                if any(set(t) != set(tables[0]) for t in tables):
                    raise ValueError(f"the pooled results evaluated different {name!r} tasks: pool runs of one task set")
                rates[mode] = mean_by_task(tables)
        sets[name] = {**summarize(rates), "tasks": doc["tasks"], "pooled": len(docs)}
    return {"sets": sets}


def format_result(result: Mapping[str, Any]) -> str:
    lines = []
    for name, doc in result["sets"].items():
        cells = [f"{mode} {doc[mode]['mean']:.3f} +- {doc[mode]['se']:.3f}" for mode in MODES if mode in doc]
        lines.append(f"{name} ({doc['tasks']} tasks): {', '.join(cells)} (mean +- se over tasks)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a Hugging Face folder (e.g. a checkpoint's actor/huggingface)")
    p.add_argument("--domain", default="shop")
    p.add_argument("--samples", type=int, default=HeldoutSettings.samples, help="k sampled episodes per task")
    p.add_argument("--temperature", type=float, default=HeldoutSettings.temperature)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=HeldoutSettings.batch_size)
    p.add_argument("--sets", nargs="+", default=["heldout", "ood"], choices=["heldout", "ood", "test"],
                   help="test: the domain's larger held-out split, where it declares one")
    p.add_argument("--response-budget", type=int, default=HeldoutSettings().limits.response_budget,
                   help="tokens per episode after the first prompt (the trainer's data.max_response_length)")
    p.add_argument("--max-tasks", type=int, default=None, help="the first N tasks of each set (smoke runs)")
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--compare", nargs=2, metavar=("NEW", "OLD"),
                   help="paired difference of two results; a side may pool several (comma-separated: its seeds)")
    args = p.parse_args(argv)
    if args.compare:
        new, old = (pooled([json.loads(Path(path).read_text()) for path in side.split(",")]) for side in args.compare)
        for label, result in (("NEW", new), ("OLD", old)):
            print(f"{label}: {format_result(result)}")
        print(json.dumps(compare(new, old), indent=1))
        return 0
    if not args.model:
        p.error("--model is required (or --compare NEW OLD)")
    sets = {name: tasks[: args.max_tasks] for name, tasks in evaluation_sets(args.domain).items() if name in args.sets}
    settings = HeldoutSettings(samples=args.samples, temperature=args.temperature, seed=args.seed,
                               batch_size=args.batch_size, limits=Limits(args.response_budget, 8))
    result = evaluate_model(args.model, sets, settings, args.domain)
    print(format_result(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
