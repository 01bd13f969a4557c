"""Where one GRPO training step's wall time goes, on CPU with the tiny model.

    python benchmarks/replication/profile_step.py --model benchmarks/replication/results/models/sft \
        [--prompts 2 --n 4 --steps 2] [--verl-log path/to/verl_metrics.jsonl]

Two sources:

1. Own timers (always): one step of the SEAL loop rebuilt in this process from the project's parts, with the
   shapes of ``seal-train``'s CPU config (2 prompts x 4 rollouts, temperature 1, 4 assistant messages per user
   turn, 8 assistant messages per episode):
   generation (HF ``generate``), prompt rendering/tokenisation, env reset, env stepping split into sandbox
   calls (``Sandbox.call``), verification (``judge_turn``), diagnosis (``diagnose_turn``) and the rest of
   ``env.step`` (parsing, schema checks, observation building), the closed loop (failure profile + ``evolve``
   + ``mutate``), the SEAL advantage (``Reweighter.weights`` + ``seal_grpo_advantage``), and the update
   (old log-probs, reference log-probs, one PPO-clip + KL-loss actor step with AdamW), each as a share of
   the step. Timers wrap the functions the env calls (``seal_envs.env.judge_turn`` / ``diagnose_turn`` and
   the sandbox's ``call``), so nothing about the env changes.
2. verl's own timing metrics (``--verl-log``, a verl ``file`` logger JSONL written by ``run.py``): ``timing_s/gen``,
   ``timing_s/old_log_prob``, ``timing_s/ref``, ``timing_s/adv``, ``timing_s/update_actor``,
   ``timing_s/update_weights``, ``timing_s/step`` and ``agent_loop/tool_calls`` (env time per sample, as
   measured by the agent loop), when such a log exists.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DOMAIN, RESULTS, set_threads, task_set, write_json  # noqa: E402

PHASES = ["generation", "render", "env_reset", "sandbox", "verify", "diagnosis", "env_other", "closed_loop",
          "advantage", "old_log_prob", "ref", "update_actor"]
ENV_PHASES = ("env_reset", "sandbox", "verify", "diagnosis", "env_other")


class _LocalBoard:
    """Holds the published interface in this process (in training it is a Ray actor; that RPC is not timed)."""

    def publish(self, doc, step=None):
        self.doc = doc


def _instrument_env(timers: dict[str, float]):
    """Wrap the names ``seal_envs.env`` calls for verification and diagnosis with timers (restorable)."""
    import seal_envs.env as env_mod

    originals = {"judge_turn": env_mod.judge_turn, "diagnose_turn": env_mod.diagnose_turn}

    def wrap(name, key):
        fn = originals[name]

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timers[key] += time.perf_counter() - t0
        return timed

    env_mod.judge_turn = wrap("judge_turn", "verify")
    env_mod.diagnose_turn = wrap("diagnose_turn", "diagnosis")

    def restore():
        for k, v in originals.items():
            setattr(env_mod, k, v)
    return restore


def _timed_sandbox(env, timers):
    sb = env.unwrapped._sandbox
    if sb is None or getattr(sb, "_seal_timed", False):
        return
    call = sb.call

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return call(*a, **k)
        finally:
            timers["sandbox"] += time.perf_counter() - t0
    sb.call = timed
    sb._seal_timed = True


def rollout(model, tok, env, task, timers, *, temperature: float, max_new_tokens: int, max_assistant: int,
            seed: int):
    """One episode: generate with the chat template + tools, step the env; returns a Demonstration-like record."""
    import torch

    from seal_trainer.warm_start import Demonstration

    t0 = time.perf_counter()
    obs, info = env.reset(seed=seed, options={"task_id": task.id})
    timers["env_reset"] += time.perf_counter() - t0
    _timed_sandbox(env, timers)
    messages = [{"role": m["role"], "content": m["content"]} for m in obs]
    tools_at: dict[int, list] = {}
    reward, labels = 0.0, []
    for _ in range(max_assistant):
        t0 = time.perf_counter()
        ids = tok.apply_chat_template(messages, tools=info["tools"], add_generation_prompt=True, return_tensors="pt",
                                      return_dict=False)
        if not isinstance(ids, torch.Tensor):
            ids = ids["input_ids"]
        timers["render"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature,
                                 top_p=1.0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        new = out[0, ids.shape[1]:].tolist()
        while new and new[-1] in (tok.eos_token_id, tok.pad_token_id):
            new.pop()
        text = tok.decode(new, skip_special_tokens=True)
        timers["generation"] += time.perf_counter() - t0
        tools_at[len(messages)] = info["tools"]
        messages.append({"role": "assistant", "content": text})
        v0, d0, s0 = timers["verify"], timers["diagnosis"], timers["sandbox"]
        t0 = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(text)
        elapsed = time.perf_counter() - t0
        _timed_sandbox(env, timers)
        inner = (timers["verify"] - v0) + (timers["diagnosis"] - d0) + (timers["sandbox"] - s0)
        timers["env_other"] += max(0.0, elapsed - inner)
        messages += [{"role": m["role"], "content": m["content"]} for m in obs]
        labels = list(info.get("labels", labels))
        if terminated or truncated:
            break
    return Demonstration(task.id, messages, tools_at, float(reward)), labels


def profile_one_step(model_path, *, prompts: int = 2, n: int = 4, seed: int = 0, temperature: float = 1.0,
                     max_new_tokens: int = 96, max_assistant: int = 8, max_steps_per_turn: int = 4,
                     lr: float = 1e-5, sandbox: str = "inprocess") -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_envs.env import ToolUseEnv
    from seal_trainer.advantage import ReweightConfig, Reweighter, seal_grpo_advantage
    from seal_trainer.closed_loop import ClosedLoop
    from seal_trainer.warm_start import render_examples

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
    ref = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    train_tasks = list(task_set("train"))
    batch_tasks = rng.sample(train_tasks, prompts)
    env = ToolUseEnv(domain=DOMAIN, tasks=train_tasks, mode="train", sandbox=sandbox,
                     max_steps_per_turn=max_steps_per_turn)
    loop = ClosedLoop(True, True, 1, board=_LocalBoard())
    timers: dict[str, float] = defaultdict(float)
    restore = _instrument_env(timers)
    t_step = time.perf_counter()
    try:
        trajs, labels, uids = [], [], []
        for p, task in enumerate(batch_tasks):
            for j in range(n):
                demo, lab = rollout(model, tok, env, task, timers, temperature=temperature,
                                    max_new_tokens=max_new_tokens, max_assistant=max_assistant, seed=seed * 1000 + p * n + j)
                trajs.append(demo)
                labels.append(lab)
                uids.append(p)
        t0 = time.perf_counter()
        loop.observe(labels)
        state, _ = loop.update(1)
        env.mutate(state)
        timers["closed_loop"] += time.perf_counter() - t0
        # sequences for the update: each rollout rendered with its tools, loss mask = generated assistant tokens
        seqs = [(k, e) for k, d in enumerate(trajs) for e in render_examples(tok, d)]
        rewards = [d.reward for d in trajs]
        t0 = time.perf_counter()
        weights = Reweighter(ReweightConfig()).weights(labels, rewards, [True] * len(trajs))
        scores = torch.zeros(len(trajs), 1)
        scores[:, 0] = torch.tensor(rewards)
        adv, _ = seal_grpo_advantage(scores, torch.ones(len(trajs), 1), uids, weights=torch.as_tensor(weights),
                                     valid=torch.ones(len(trajs), dtype=torch.bool))
        adv_per_traj = adv[:, 0].tolist()
        timers["advantage"] += time.perf_counter() - t0

        def logp(m, e):
            ids = torch.tensor([e["input_ids"]])
            labels_t = torch.tensor([e["labels"]])
            logits = m(input_ids=ids).logits[:, :-1]
            tgt = labels_t[:, 1:]
            mask = tgt != -100
            lp = torch.log_softmax(logits.float(), -1).gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            return lp, mask

        t0 = time.perf_counter()
        with torch.no_grad():
            old = [logp(model, e)[0] for _, e in seqs]
        timers["old_log_prob"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            ref_lp = [logp(ref, e)[0] for _, e in seqs]
        timers["ref"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        model.train()
        n_tok = sum(sum(l != -100 for l in e["labels"]) for _, e in seqs) or 1
        for (k, e), o, r in zip(seqs, old, ref_lp):
            lp, mask = logp(model, e)
            ratio = torch.exp(lp - o)
            a = adv_per_traj[k]
            pg = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
            kl = torch.exp(r - lp) - (r - lp) - 1  # low-variance KL, as verl's kl_loss default
            loss = ((pg + 0.001 * kl) * mask).sum() / n_tok
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.eval()
        timers["update_actor"] += time.perf_counter() - t0
    finally:
        restore()
        env.close()
    step = time.perf_counter() - t_step
    phases = {k: timers.get(k, 0.0) for k in PHASES}
    env_total = sum(phases[k] for k in ENV_PHASES)
    return {
        "step_s": step, "phases_s": phases,
        "share": {k: v / step for k, v in phases.items()},
        "unaccounted_s": step - sum(phases.values()),
        "env_plus_diagnosis_share": (env_total + phases["closed_loop"]) / step,
        "env_share": env_total / step, "generation_share": phases["generation"] / step,
        "update_share": (phases["old_log_prob"] + phases["ref"] + phases["update_actor"]) / step,
        "rollouts": len(trajs), "sequences": len(seqs), "tokens": sum(len(e["input_ids"]) for _, e in seqs),
        "reward_mean": sum(rewards) / len(rewards),
        "labels": [l for ls in labels for l in ls],
        "settings": dict(prompts=prompts, n=n, temperature=temperature, max_new_tokens=max_new_tokens,
                         max_assistant=max_assistant, max_steps_per_turn=max_steps_per_turn, sandbox=sandbox),
    }


def ground_truth_env_cost(sandbox: str = "inprocess", repeats: int = 3) -> dict[str, Any]:
    """Env-side cost of episodes whose calls all execute: the RL training tasks' ground truth played through the
    env (``seal_trainer.warm_start.record_demonstration``), with the same timers; per episode, after a warm-up pass (the
    verifier's reference replays are cached per process, as in training)."""
    from seal_envs.env import ToolUseEnv
    from seal_envs.sandbox.inprocess import InProcessSandbox
    from seal_trainer.warm_start import record_demonstration

    train_tasks = list(task_set("train"))
    timers: dict[str, float] = defaultdict(float)
    env = ToolUseEnv(domain=DOMAIN, tasks=train_tasks, mode="train", sandbox=sandbox)
    for t in train_tasks:  # warm-up: reference replays
        record_demonstration(env, t)
    original_call = InProcessSandbox.call

    def timed_call(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return original_call(self, *a, **k)
        finally:
            timers["sandbox"] += time.perf_counter() - t0

    restore = _instrument_env(timers)
    InProcessSandbox.call = timed_call
    calls = 0
    t0 = time.perf_counter()
    try:
        for _ in range(repeats):
            for t in train_tasks:
                record_demonstration(env, t)
                calls += sum(len(turn.ground_truth) for turn in t.turns)
    finally:
        InProcessSandbox.call = original_call
        restore()
        env.close()
    total = time.perf_counter() - t0
    episodes = repeats * len(train_tasks)
    return {"episodes": episodes, "tool_calls": calls, "per_episode_ms": 1000 * total / episodes,
            "sandbox_ms_per_episode": 1000 * timers["sandbox"] / episodes,
            "verify_ms_per_episode": 1000 * timers["verify"] / episodes,
            "diagnosis_ms_per_episode": 1000 * timers["diagnosis"] / episodes, "sandbox": sandbox}


def verl_timing(path: Path) -> dict[str, Any] | None:
    """Mean of verl's per-step timing metrics in a file-logger JSONL (training steps only)."""
    if not path or not Path(path).exists():
        return None
    keys = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        try:
            data = json.loads(line).get("data", {})
        except json.JSONDecodeError:
            continue
        if "timing_s/step" not in data:
            continue
        for k, v in data.items():
            if k.startswith("timing_s/") or k.startswith("agent_loop/"):
                keys[k].append(float(v))
    if not keys:
        return None
    mean = {k: sum(v) / len(v) for k, v in keys.items()}
    step = mean.get("timing_s/step", 0.0) or 1.0
    return {"steps": len(keys["timing_s/step"]), "mean_s": mean,
            "share": {k: v / step for k, v in mean.items() if k.startswith("timing_s/")}}


def print_profile(prof: dict[str, Any]) -> None:
    print(f"one step: {prof['step_s']:.1f}s ({prof['rollouts']} rollouts, {prof['sequences']} sequences, "
          f"{prof['tokens']} tokens, reward {prof['reward_mean']:.2f})")
    for k in PHASES:
        print(f"  {k:14s} {prof['phases_s'][k]:8.3f}s  {100 * prof['share'][k]:6.2f}%")
    print(f"  {'unaccounted':14s} {prof['unaccounted_s']:8.3f}s")
    print(f"generation {100 * prof['generation_share']:.1f}% | env (reset+sandbox+verify+diagnosis+rest) "
          f"{100 * prof['env_share']:.2f}% | env + closed loop {100 * prof['env_plus_diagnosis_share']:.2f}% "
          f"(target < 10%) | update {100 * prof['update_share']:.1f}%")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(RESULTS / "models" / "sft"))
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--sandbox", default="inprocess")
    p.add_argument("--verl-log", type=Path, default=None)
    p.add_argument("--json", type=Path, default=RESULTS / "profile_step.json")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    set_threads(args.threads)
    runs = []
    for s in range(args.steps):
        prof = profile_one_step(args.model, prompts=args.prompts, n=args.n, seed=s, max_new_tokens=args.max_new_tokens,
                                sandbox=args.sandbox)
        print_profile(prof)
        runs.append(prof)
    gt = ground_truth_env_cost(args.sandbox) if args.sandbox == "inprocess" else None
    if gt:
        print(f"env cost with every call executing (ground truth, {gt['episodes']} episodes, {gt['tool_calls']} calls): "
              f"{gt['per_episode_ms']:.2f} ms/episode (sandbox {gt['sandbox_ms_per_episode']:.2f}, verify "
              f"{gt['verify_ms_per_episode']:.2f}, diagnosis {gt['diagnosis_ms_per_episode']:.2f})")
    doc = {"own_timers": runs, "ground_truth_env_cost": gt,
           "verl": verl_timing(args.verl_log) if args.verl_log else None}
    if doc["verl"]:
        print("verl timing (mean per step): " + ", ".join(f"{k}={v:.2f}s" for k, v in doc["verl"]["mean_s"].items()
                                                          if k.startswith("timing_s/")))
    write_json(args.json, doc)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
