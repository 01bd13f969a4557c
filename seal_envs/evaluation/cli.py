"""``seal-eval``: evaluate a policy on any SEAL env in its evaluation interface (BFCL V3 multi-turn by default).

    seal-eval --policy replay --split eval --sandbox inprocess            # must print 100.00 everywhere
    seal-eval --policy openai --base-url http://localhost:8000/v1 --model Qwen2.5-7B-Instruct --split eval
    seal-eval --policy hf --model /path/to/hf-model --category base --limit 20
    seal-eval --env seal/Shop-v0 --workers 4                              # any registered env id
    seal-eval --domain path/to/calendar --split eval                     # any domain (its tasks.json or a split)
    seal-eval compare RUN_A RUN_B                                        # two result folders side by side

Envs are made with ``mode="eval"``: the original interface, never the training-time cues. BFCL episodes are
also scored by BFCL's official checker (in-process) and the agreement is printed. ``--limit`` keeps every
category in proportion; ``--workers`` plays episodes concurrently, one env (and sandbox) per worker.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BFCL_ENV = "seal/BFCL-v3-MultiTurn-v0"
DOMAIN_ENV = "seal/ToolUse-v0"

from seal_envs.formats import DEFAULT_TOOL_FORMAT, tool_format_names


@dataclass(frozen=True)
class EvalConfig:
    policy: str = "replay"
    split: str | None = None  # None: BFCL's eval split by default; an env's own tasks with --env / --domain
    category: str | None = None
    limit: int | None = None
    sandbox: str = "docker"
    out: str = "seal-eval-results"
    official_check: bool = True
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 2048
    env: str | None = None  # a registered env id; default: BFCL's, or seal/ToolUse-v0 with --domain
    domain: str | None = None  # a bundled domain name or a folder with tools.json
    workers: int = 1
    tool_format: str = DEFAULT_TOOL_FORMAT


@dataclass(frozen=True)
class EvalTarget:
    """What a run plays: the env id and keyword arguments that make one eval env, and the selected tasks."""

    env_id: str
    env_kwargs: dict[str, Any]
    tasks: tuple
    benchmark: str

    def make_env(self):
        import gymnasium as gym

        return gym.make(self.env_id, tasks=self.tasks, disable_env_checker=True, **self.env_kwargs)


def policy_factory(config: EvalConfig) -> Callable[[], Any]:
    """A maker of one policy per worker: replay scripts are per episode, a remote endpoint is shared, a local
    model is loaded once and serialised."""
    from seal_envs.evaluation import policies

    if config.policy == "replay":
        return lambda: policies.ReplayPolicy(tool_format=config.tool_format)
    if config.policy == "openai":
        if not (config.base_url and config.model):
            raise SystemExit("seal-eval: --policy openai needs --base-url and --model")
        shared = policies.OpenAIPolicy(policies.OpenAIConfig(config.base_url, config.model, config.api_key_env,
                                                             config.temperature, config.max_tokens),
                                      config.tool_format)
        return lambda: shared
    if config.policy == "hf":
        if not config.model:
            raise SystemExit("seal-eval: --policy hf needs --model (a local Hugging Face model folder)")
        local = policies.HFPolicy(policies.HFConfig(config.model, config.max_tokens, config.temperature,
                                                    tool_format=config.tool_format))
        return lambda: local
    raise SystemExit(f"seal-eval: unknown policy {config.policy!r}")


def eval_target(config: EvalConfig) -> EvalTarget:
    """Resolve ``--env`` / ``--domain`` / ``--split`` / ``--category`` / ``--limit`` into an env and its tasks."""
    import gymnasium as gym

    from seal_envs.evaluation.runner import stratified

    env_id = config.env or (DOMAIN_ENV if config.domain else BFCL_ENV)
    kwargs: dict[str, Any] = {"mode": "eval", "sandbox": config.sandbox, "tool_format": config.tool_format}
    if config.domain:
        kwargs["domain"] = config.domain
    split = config.split or (None if config.env or config.domain else "eval")
    probe = gym.make(env_id, disable_env_checker=True, **kwargs)
    try:
        domain = probe.unwrapped.domains[0]
        tasks = domain.split_tasks(split) if split else probe.unwrapped.tasks
    finally:
        probe.close()
    if config.category:
        categories = sorted({t.category for t in tasks})
        tasks = tuple(t for t in tasks if t.category == config.category)
        if not tasks:
            raise SystemExit(f"seal-eval: no task of category {config.category!r}; categories: {categories}")
    benchmark = " ".join([env_id, *([f"domain={domain.name}"] if config.domain else []),
                          *([f"split={split}"] if split else []),
                          *([f"category={config.category}"] if config.category else [])])
    return EvalTarget(env_id, kwargs, stratified(tasks, config.limit), benchmark)


def evaluate(config: EvalConfig, progress: bool = True):
    """Run the configured tasks; returns (summary, records, run) where ``run`` names the policy, the benchmark and
    the date."""
    from seal_envs.bfcl.checker import official_verdict
    from seal_envs.evaluation.report import summarize
    from seal_envs.evaluation.runner import run_episodes
    from seal_envs.evaluation.tau2 import tau2_verdict
    from seal_envs.sandbox import SandboxConfig
    from seal_envs.spec.loader import load_domain

    target = eval_target(config)
    records = run_episodes(target.tasks, target.make_env, policy_factory(config), config.workers, progress)
    for task, record in zip(target.tasks, records):  # BFCL's checker runs its backends in-process: serially
        checker = task.metadata.get("checker")
        if not config.official_check or record.task_error is not None or record.infrastructure_error:
            continue
        if checker == "bfcl":
            record.official_valid = bool(official_verdict(task, record.calls)["valid"])
        elif checker == "tau2":
            record.official_valid = tau2_verdict(task, record.calls, record.messages, load_domain(
                config.domain or task.domain), SandboxConfig(backend=config.sandbox))["reward"] == 1.0
        record.official_checker = checker if record.official_valid is not None else None
    run = {"name": config.model or config.policy, "benchmark": target.benchmark,
           "date": datetime.datetime.now().isoformat(timespec="seconds")}
    return summarize(records), records, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seal-eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", choices=("replay", "openai", "hf"), default="replay")
    parser.add_argument("--env", help=f"a registered env id (default: {BFCL_ENV}, or {DOMAIN_ENV} with --domain)")
    parser.add_argument("--domain", help="a bundled domain name or a folder with tools.json (and tasks.json)")
    parser.add_argument("--split", help="a declared task split: train, eval (BFCL's default), all; sft for shop")
    parser.add_argument("--category", default=None, help="only tasks of this category (e.g. base, miss_func)")
    parser.add_argument("--limit", type=int, default=None,
                        help="at most N tasks, every category in proportion (the first of each, deterministic)")
    parser.add_argument("--workers", type=int, default=1, help="episodes played concurrently (one env each)")
    parser.add_argument("--sandbox", choices=("docker", "inprocess"), default="docker")
    parser.add_argument("--out", default="seal-eval-results", help="folder for results.json and accuracy.png")
    parser.add_argument("--no-official-check", dest="official_check", action="store_false",
                        help="skip re-scoring every BFCL episode with BFCL's official checker (and every tau2 "
                             "episode with tau2's grading)")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    parser.add_argument("--model", help="model name (openai) or local model folder (hf)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--tool-format", choices=tool_format_names(), default=DEFAULT_TOOL_FORMAT,
                        help="how the policy writes tool calls (seal_envs.formats); BFCL's own decoding reads only "
                             "hermes, so scores stay BFCL-exact")
    return parser


def compare_main(argv: list[str]) -> int:
    from seal_envs.evaluation.report import format_comparison, load_results

    parser = argparse.ArgumentParser(prog="seal-eval compare", description="two seal-eval result folders side by side")
    parser.add_argument("run_a", help="a folder with results.json")
    parser.add_argument("run_b", help="another one")
    args = parser.parse_args(argv)
    try:
        print(format_comparison(load_results(Path(args.run_a)), load_results(Path(args.run_b))))
    except (OSError, ValueError) as exc:
        print(f"seal-eval compare: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    from seal_envs.evaluation.report import format_table, write_results

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    config = EvalConfig(**vars(build_parser().parse_args(argv)))
    summary, records, run = evaluate(config)
    print(format_table(summary))
    results, chart = write_results(Path(config.out), summary, records, asdict(config), run)
    print(f"wrote {results} and {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
