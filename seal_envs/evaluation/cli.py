"""``seal-eval``: evaluate a policy on BFCL V3 multi-turn through SEAL's env, in BFCL's evaluation interface.

    seal-eval --policy replay --split eval --sandbox inprocess            # must print 100.00 everywhere
    seal-eval --policy openai --base-url http://localhost:8000/v1 --model Qwen2.5-7B-Instruct --split eval
    seal-eval --policy hf --model /path/to/hf-model --category base --limit 20

Envs are made with ``mode="eval"``: the original BFCL interface, never the training-time cues. Every episode
is also scored by BFCL's official checker (in-process) and the agreement is printed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from seal_envs.bfcl.data import CATEGORIES
from seal_envs.formats import DEFAULT_TOOL_FORMAT, tool_format_names


@dataclass(frozen=True)
class EvalConfig:
    policy: str = "replay"
    split: str = "eval"
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
    tool_format: str = DEFAULT_TOOL_FORMAT


def make_policy(config: EvalConfig):
    from seal_envs.evaluation import policies

    if config.policy == "replay":
        return policies.ReplayPolicy(tool_format=config.tool_format)
    if config.policy == "openai":
        if not (config.base_url and config.model):
            raise SystemExit("seal-eval: --policy openai needs --base-url and --model")
        return policies.OpenAIPolicy(policies.OpenAIConfig(config.base_url, config.model, config.api_key_env,
                                                           config.temperature, config.max_tokens), config.tool_format)
    if config.policy == "hf":
        if not config.model:
            raise SystemExit("seal-eval: --policy hf needs --model (a local Hugging Face model folder)")
        return policies.HFPolicy(policies.HFConfig(config.model, config.max_tokens, config.temperature,
                                                   tool_format=config.tool_format))
    raise SystemExit(f"seal-eval: unknown policy {config.policy!r}")


def evaluate(config: EvalConfig, progress: bool = True):
    """Run the configured split; returns (summary, records)."""
    from seal_envs.bfcl import make_env
    from seal_envs.bfcl.checker import official_verdict
    from seal_envs.evaluation.report import summarize
    from seal_envs.evaluation.runner import run_episode

    env = make_env(split=config.split, category=config.category, mode="eval", sandbox=config.sandbox,
                   tool_format=config.tool_format)
    tasks = env.unwrapped.tasks[: config.limit] if config.limit else env.unwrapped.tasks
    policy = make_policy(config)
    records = []
    try:
        for task in tqdm(tasks, desc="seal-eval", unit="task", disable=not progress):
            record = run_episode(env, policy, task)
            if config.official_check and record.task_error is None and not record.infrastructure_error:
                record.official_valid = bool(official_verdict(task, record.calls)["valid"])
            records.append(record)
    finally:
        env.close()
    return summarize(records), records


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seal-eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", choices=("replay", "openai", "hf"), default="replay")
    parser.add_argument("--split", choices=("train", "eval", "all"), default="eval")
    parser.add_argument("--category", choices=CATEGORIES, default=None)
    parser.add_argument("--limit", type=int, default=None, help="first N tasks of the split")
    parser.add_argument("--sandbox", choices=("docker", "inprocess"), default="docker")
    parser.add_argument("--out", default="seal-eval-results", help="folder for results.json and accuracy.png")
    parser.add_argument("--no-official-check", dest="official_check", action="store_false",
                        help="skip re-scoring every episode with BFCL's official checker")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    parser.add_argument("--model", help="model name (openai) or local model folder (hf)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--tool-format", choices=tool_format_names(), default=DEFAULT_TOOL_FORMAT,
                        help="how the policy writes tool calls (seal_envs.formats); BFCL's own decoding reads only "
                             "hermes, so scores stay BFCL-exact")
    return parser


def main(argv: list[str] | None = None) -> int:
    from seal_envs.evaluation.report import format_table, write_results

    config = EvalConfig(**vars(build_parser().parse_args(argv)))
    summary, records = evaluate(config)
    print(format_table(summary))
    results, chart = write_results(Path(config.out), summary, records, asdict(config))
    print(f"wrote {results} and {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
