"""SEAL's mechanism measured without training: does the evolved interface change what the policy does?

    python benchmarks/mechanism.py [--model PATH] [--tasks 32] [--samples 8] [--arms original,evolved]
                                   [--batch-size 16] [--out benchmarks/results/mechanism.json]

The warm-started model seal-train starts from (default: SmolLM2-135M-Instruct after the warm start of
``seal_trainer/config/seal_cpu.yaml``, taken from its cache) plays the shop domain's training tasks, G samples
per task at the training temperature, under each arm's interface:

- ``original``: ``InterfaceState()``, what evaluation sees;
- ``evolved``: ``evolve(InterfaceState.initial(), <failure profile of the original arm's rollouts>)``, the
  interface SEAL's first closed-loop step would install from this very profile (with the default gate, the
  reference's: schema cues from the start, guidelines for qualifying failure tags);
- ``schema_cues`` / ``error_hints`` / ``guidelines``: the evolved state with only that cue family left on
  (skipped when the evolved state does not turn the family on).

Every arm plays the same tasks with the same sampling seed. Per arm: success rate (reward 1 share), turn pass
rate (share of agent-attributable turns labelled pass), label and tag shares, the share of GRPO groups (the G
samples of a task) whose rewards are not all equal (the groups that give a non-zero advantage), truncations,
time, and the trajectory weights w the trainer would give these rollouts: per label and per tag, the mean w with
fixed rho and with dynamic rho (one update from these rollouts, as at the first step of an epoch), over all
rollouts and over those in informative groups (the ones with a gradient). Generation is batched
(``seal_envs.evaluation.batched``); envs run in-process.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from seal_envs.diagnosis import NON_AGENT_LABELS, Label
from seal_envs.evaluation.batched import Job, Limits, Outcome, play_episodes
from seal_envs.interface import FailureInput, FailureProfile, InterfaceState, evolve
from seal_trainer.advantage import ReweightConfig, Reweighter, in_informative_group, mean_weight_by_name

CONFIG = Path(__file__).resolve().parents[1] / "seal_trainer" / "config" / "seal_cpu.yaml"
CUE_ARMS = ("schema_cues", "error_hints", "guidelines")
ARMS = ("original", "evolved", *CUE_ARMS)
NON_AGENT = {label.value for label in NON_AGENT_LABELS}


def training_settings(path: Path = CONFIG) -> dict:
    """The rollout settings of seal-train's CPU config: temperature, budgets, step cap, warm start."""
    import yaml

    cfg = yaml.safe_load(path.read_text())
    rollout = cfg["actor_rollout_ref"]["rollout"]
    return {"temperature": float(rollout["temperature"]), "top_p": float(rollout.get("top_p", 1.0)),
            "max_steps_per_turn": int(cfg["seal"]["env"]["max_steps_per_turn"]),
            "max_assistant_turns": int(cfg["seal"]["max_assistant_turns"]),
            "max_message_tokens": int(cfg["seal"].get("max_message_tokens") or 0) or None,
            "response_budget": int(cfg["data"]["max_response_length"]),
            "warm_start": dict(cfg["seal"]["warm_start"])}


def default_model(warm_start: Mapping) -> Path:
    """seal-train's default model folder (the GGUF conversion and warm start are cached, never redone here)."""
    from seal_trainer.models import resolve_model
    from seal_trainer.warm_start import WarmStartConfig, warm_started_model

    return warm_started_model(resolve_model("smollm2-135m"), "shop", WarmStartConfig(**warm_start))


def outcomes_profile(outcomes: Sequence[Outcome]) -> FailureProfile:
    """The failure profile the closed loop would build from these rollouts (faults masked, as in training)."""
    return FailureProfile.from_rollouts((o.labels, o.tags, o.reward) for o in outcomes
                                        if not (o.infrastructure_error or o.task_error))


def arm_interfaces(profile: FailureInput, arms: Sequence[str]) -> dict[str, InterfaceState]:
    """The interface of each evolved arm, from the original arm's profile; inactive cue families left out."""
    evolved = evolve(InterfaceState.initial(), profile)
    only = {
        "schema_cues": replace(evolved, error_hints=False, guidelines=()),
        "error_hints": replace(evolved, schema_cues=False, guidelines=()),
        "guidelines": replace(evolved, schema_cues=False, error_hints=False),
    }
    states = {"evolved": evolved, **only}
    return {arm: states[arm] for arm in arms if arm != "original" and not states[arm].is_original}


def weight_table(outcomes: Sequence[Outcome]) -> dict:
    """Mean trajectory weight per label and per tag (rollouts that have it), fixed and dynamic rho, over all
    valid rollouts and over those in informative groups."""
    kept = [o for o in outcomes if not (o.infrastructure_error or o.task_error)]
    tags = [o.tags for o in kept]
    rewards = [o.reward for o in kept]
    weights = {mode: Reweighter(ReweightConfig(rho=mode)).weights(tags, rewards, epoch=0)
               for mode in ("fixed", "dynamic")}
    grad = in_informative_group([o.task_id for o in kept], rewards, [True] * len(kept))
    rows, grad_rows = range(len(kept)), [j for j in range(len(kept)) if grad[j]]
    table: dict = {}
    for kind in ("labels", "tags"):
        names = [getattr(o, kind) for o in kept]
        count = Counter(n for j in rows for n in set(names[j]))
        with_grad = Counter(n for j in grad_rows for n in set(names[j]))
        means = {mode: (mean_weight_by_name(w, names, rows), mean_weight_by_name(w, names, grad_rows))
                 for mode, w in weights.items()}
        table[kind] = {name: {"rollouts": count[name], "with_gradient": with_grad[name],
                              **{k: v for mode, (all_w, grad_w) in means.items()
                                 for k, v in ((f"w_{mode}", all_w[name]), (f"w_{mode}_grad", grad_w.get(name)))}}
                       for name in sorted(count)}
    return table


def arm_summary(outcomes: Sequence[Outcome], samples: int) -> dict:
    """Success, turn pass rate, label and tag shares, the share of GRPO groups with a non-zero advantage, w."""
    labels = Counter(label for o in outcomes for label in o.labels)
    tags = Counter(tag for o in outcomes for tag in o.tags)
    agent_turns = sum(n for label, n in labels.items() if label not in NON_AGENT)
    groups: dict[str, list[float]] = {}
    for o in outcomes:
        if not (o.infrastructure_error or o.task_error):  # the trainer leaves these out of GRPO groups
            groups.setdefault(o.task_id, []).append(o.reward)
    total = sum(labels.values())
    return {
        "rollouts": len(outcomes),
        "success_rate": sum(o.reward == 1.0 for o in outcomes) / max(1, len(outcomes)),
        "turn_pass_rate": labels.get(Label.PASS.value, 0) / max(1, agent_turns),
        "label_shares": {k: v / total for k, v in labels.most_common()},
        "label_counts": dict(labels.most_common()),
        "tag_counts": dict(tags.most_common()),
        "weights": weight_table(outcomes),
        "groups": len(groups),
        "nonzero_advantage_groups": sum(len(set(r)) > 1 for r in groups.values()) / max(1, len(groups)),
        "truncated": sum(o.truncated for o in outcomes),
        "samples_per_task": samples,
    }


def markdown(results: Mapping[str, dict]) -> str:
    rows = ["| arm | rollouts | success | turn pass | non-zero-adv. groups | truncated | time (s) | top labels |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for arm, r in results.items():
        top = ", ".join(f"{k} {v:.0%}" for k, v in list(r["label_shares"].items())[:4])
        rows.append(f"| {arm} | {r['rollouts']} | {r['success_rate']:.1%} | {r['turn_pass_rate']:.1%} | "
                    f"{r['nonzero_advantage_groups']:.1%} | {r['truncated']} | {r['time_s']:.0f} | {top} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    train = training_settings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a Hugging Face folder; default: seal-train's warm-started SmolLM2")
    parser.add_argument("--tasks", type=int, default=None, help="use the first N training tasks (default: all)")
    parser.add_argument("--samples", type=int, default=8, help="G: samples per task")
    parser.add_argument("--arms", default="original,evolved", help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--temperature", type=float, default=train["temperature"])
    parser.add_argument("--top-p", type=float, default=train["top_p"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16, help="episodes generated together (memory)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="cap per message (default: seal.max_message_tokens)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "mechanism.json"))
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := sorted(set(arms) - set(ARMS)):
        parser.error(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    if "original" not in arms:  # every other arm evolves from the original arm's profile
        arms.insert(0, "original")

    import torch
    from tqdm import tqdm

    from seal_envs.env import ToolUseEnv
    from seal_envs.evaluation.batch_generate import Sampling, load_generator
    from seal_envs.spec import load_domain

    torch.set_num_threads(args.threads)
    model = Path(args.model) if args.model else default_model(train["warm_start"])
    tokenizer, generator = load_generator(str(model))
    tasks = list(load_domain("shop").split_tasks("train"))[: args.tasks]
    jobs = [Job(t.id, s) for t in tasks for s in range(args.samples)]
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    limits = Limits(train["response_budget"], train["max_assistant_turns"],
                    args.max_new_tokens or train["max_message_tokens"])
    print(f"model {model}\n{len(tasks)} tasks x {args.samples} samples, T={args.temperature}, top_p={args.top_p}, "
          f"batch {args.batch_size}, arms {', '.join(arms)}", flush=True)

    def run(arm: str, interface: InterfaceState) -> tuple[dict, list[Outcome]]:
        def make_env():
            return ToolUseEnv("shop", tasks=tasks, mode="train", sandbox="inprocess",
                              max_steps_per_turn=train["max_steps_per_turn"], interface=interface)

        t0 = time.time()
        with tqdm(total=len(jobs), desc=arm, unit="episode") as bar:
            outcomes = play_episodes(make_env, jobs, tokenizer, generator, sampling, args.batch_size, limits, bar)
        summary = {**arm_summary(outcomes, args.samples), "time_s": time.time() - t0,
                   "interface": interface.to_json()}
        return summary, outcomes

    results, records = {}, {}
    results["original"], outcomes = run("original", InterfaceState())
    records["original"] = outcomes
    interfaces = arm_interfaces(outcomes_profile(outcomes), arms)
    for arm in arms[1:]:
        if arm not in interfaces:
            print(f"{arm}: the evolved interface does not turn it on for this profile; skipped", flush=True)
            continue
        results[arm], records[arm] = run(arm, interfaces[arm])
    print(markdown(results))
    doc = {"model": Path(model).name, "tasks": [t.id for t in tasks], "samples": args.samples,
           "sampling": {"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed},
           "limits": asdict(limits), "batch_size": args.batch_size,
           "generator": {"prefill_tokens": generator.prefill_tokens, "reused_tokens": generator.reused_tokens,
                         "generated_tokens": generator.generated_tokens},
           "arms": results,
           "rollouts": {arm: [{"task_id": o.task_id, "sample": o.sample, "reward": o.reward, "labels": o.labels,
                               "tags": o.tags, "truncated": o.truncated} for o in outcomes]
                        for arm, outcomes in records.items()}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
