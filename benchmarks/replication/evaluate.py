"""Success of a Hugging Face model folder on a shop task set, with the unchanged interface.

    python benchmarks/replication/evaluate.py --model benchmarks/replication/results/models/sft \
        [--set heldout|train|sft|bundled] [--json out.json]

Uses the project's own pieces end to end, no generation loop of ours: ``seal_envs.evaluation.policies.HFPolicy``
(chat template with ``tools=``, greedy decoding at temperature 0) and ``seal_envs.evaluation.runner.run_episode``
over ``ToolUseEnv(domain="shop", mode="eval")`` (original interface, ``mutate`` refused), so the tool calls are
read by the one parser (``seal_envs.parsing``) and scored by the env's verifier, labelled by its diagnosis.

Success = the env's reward, 1 when every turn passes (``EpisodeRecord.passed``; a turn that hits the step cap
force-quits the episode, which fails unless it was the last turn).
``--max-steps-per-turn`` (default 4, the value of seal-train's CPU config) caps assistant messages per user
turn; it is an episode cap, not part of the interface the policy sees.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DOMAIN, set_threads, task_set, write_json  # noqa: E402


def make_policy(model_path, max_new_tokens: int, temperature: float = 0.0):
    """``HFPolicy`` from ``seal_envs.evaluation`` on the CPU (greedy at temperature 0)."""
    from seal_envs.evaluation.policies import HFConfig, HFPolicy

    return HFPolicy(HFConfig(model_path=str(model_path), max_new_tokens=max_new_tokens, temperature=temperature,
                             device="cpu"))


def evaluate(model_path: str | Path, tasks, *, max_steps_per_turn: int = 4, max_new_tokens: int = 160,
             sandbox: str = "inprocess", verbose: bool = True, temperature: float = 0.0,
             samples: int = 1, seed: int = 0) -> dict[str, Any]:
    """Run every task ``samples`` times; with ``samples > 1`` also the share of GRPO-like groups (the samples
    of one task) that hold both a success and a failure, i.e. would carry a non-zero advantage."""
    import torch

    from seal_envs.env import ToolUseEnv
    from seal_envs.evaluation.runner import run_episode

    tasks = list(tasks)
    t0 = time.time()
    torch.manual_seed(seed)
    policy = make_policy(model_path, max_new_tokens, temperature)
    env = ToolUseEnv(domain=DOMAIN, tasks=tasks, mode="eval", sandbox=sandbox, max_steps_per_turn=max_steps_per_turn)
    records = []
    try:
        for task in [t for t in tasks for _ in range(samples)]:
            rec = run_episode(env, policy, task)
            records.append(rec)
            if verbose:
                print(f"[eval] {task.id:22s} passed={int(rec.passed)} labels={rec.labels}", flush=True)
    finally:
        env.close()
    labels = Counter(label for r in records for label in r.labels)
    total = sum(labels.values()) or 1
    by_cat: dict[str, list[bool]] = {}
    for r in records:
        by_cat.setdefault(r.category, []).append(r.passed)
    summary = {
        "model": Path(model_path).name,
        "n_tasks": len(records),
        "success_rate": sum(r.passed for r in records) / max(1, len(records)),
        "turn_pass_rate": labels.get("pass", 0) / total,
        "per_category": {c: sum(v) / len(v) for c, v in sorted(by_cat.items())},
        "label_counts": dict(sorted(labels.items())),
        "label_distribution": {k: v / total for k, v in sorted(labels.items())},
        "infrastructure_errors": sum(r.infrastructure_error for r in records),
        "max_steps_per_turn": max_steps_per_turn,
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "samples": samples,
        "informative_groups": _informative_groups(records) if samples > 1 else None,
        "time_s": time.time() - t0,
        "episodes": [r.to_json() for r in records],
    }
    return summary


def _informative_groups(records) -> float:
    groups: dict[str, set[bool]] = {}
    for r in records:
        groups.setdefault(r.task_id, set()).add(bool(r.passed))
    return sum(len(v) == 2 for v in groups.values()) / max(1, len(groups))


def print_summary(s: dict[str, Any]) -> None:
    print(f"model: {s['model']}")
    print(f"success on {s.get('set', '?')}: {s['success_rate']:.3f} ({round(s['success_rate'] * s['n_tasks'])}/{s['n_tasks']}); "
          f"turn pass rate {s['turn_pass_rate']:.3f}; per category {s['per_category']}; {s['time_s']:.0f}s")
    if s.get("informative_groups") is not None:
        print(f"groups with both a success and a failure (non-zero GRPO advantage): {s['informative_groups']:.3f}")
    print("label distribution: " + ", ".join(f"{k}={v:.2f}" for k, v in s["label_distribution"].items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--max-steps-per-turn", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--set", default="heldout", choices=["heldout", "train", "sft", "bundled"],
                   help="task set (common.py); default: the held-out synthetic tasks")
    p.add_argument("--limit", type=int, default=None,
                   help="N tasks spread over the categories, picked as seal-train picks its n_val tasks")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the eval setting)")
    p.add_argument("--samples", type=int, default=1, help="episodes per task (a GRPO group's size)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    set_threads(args.threads)
    tasks = task_set(args.set)
    if args.limit:
        from seal_trainer.data import split_tasks

        tasks = split_tasks(tasks, args.limit, None)[0]
    s = evaluate(args.model, tasks, max_steps_per_turn=args.max_steps_per_turn, max_new_tokens=args.max_new_tokens,
                 temperature=args.temperature, samples=args.samples, seed=args.seed)
    s["set"] = args.set
    print_summary(s)
    if args.json:
        write_json(args.json, s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
