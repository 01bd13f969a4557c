"""``seal-eval``: evaluate a policy on any SEAL env in its evaluation interface (BFCL V3 multi-turn by default).

    seal-eval --policy replay --split eval --sandbox inprocess            # must print 100.00 everywhere
    seal-eval --policy openai --base-url http://localhost:8000/v1 --model Qwen2.5-7B-Instruct --split eval
    seal-eval --policy hf --model /path/to/hf-model --category base --limit 20
    seal-eval --env seal/Shop-v0 --workers 4                              # any registered env id
    seal-eval --domain path/to/calendar --split eval                     # any domain (its tasks.json or a split)
    seal-eval --policy openai ... --samples 4                           # k samples per task: pass@k and its error
    seal-eval --domain tau2_airline --user openai:http://host:8000/v1 ... # tau2's LLM user simulator (or hf:FOLDER)
    seal-eval ... --resume                                               # continue an interrupted run (same --out)
    seal-eval compare RUN_A RUN_B                                        # two result folders side by side

Envs are made with ``mode="eval"``: the original interface, never the training-time cues. BFCL episodes are
also scored by BFCL's official checker (in-process) and the agreement is printed. ``--limit`` keeps every
category in proportion; ``--workers`` plays episodes concurrently, one env (and sandbox) per worker. Each
finished episode is appended to ``<out>/episodes.jsonl`` at once, so Ctrl-C keeps a usable partial result
(``results.json`` is written from it) and ``--resume`` plays only what is missing (and episodes that ended in an
infrastructure error). Exit status: 0, or 1 for a configuration or setup problem (a message says what to fix),
2 when some episodes ended in an infrastructure error (their score is not the policy's), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

BFCL_ENV = "seal/BFCL-v3-MultiTurn-v0"
DOMAIN_ENV = "seal/ToolUse-v0"
RUN_FILE, JOURNAL_FILE = "run.json", "episodes.jsonl"  # in --out: the run's options, one line per finished episode

from seal_envs.formats import DEFAULT_TOOL_FORMAT, tool_format_names
from seal_envs.users.config import UserConfig


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
    samples: int = 1  # episodes per task (pass@k for k up to this)
    resume: bool = False  # continue the run in ``out``: play only the episodes its episodes.jsonl lacks
    transcripts: int = 2  # episodes printed in full at the end
    user: str = "scripted"  # who plays the user: scripted, openai:<base_url>, hf:<model folder> (seal_envs.users)
    user_model: str | None = None  # openai user: the served model (None: the endpoint's only one)
    user_api_key_env: str = "OPENAI_API_KEY"
    user_temperature: float = 0.0  # tau2's default


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
    user = user_config(config)
    if user.conversational:
        kwargs["user"] = user
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
                          *([f"category={config.category}"] if config.category else []),
                          *([f"user={user.spec}"] if user.conversational else [])])
    return EvalTarget(env_id, kwargs, stratified(tasks, config.limit), benchmark)


def user_config(config: EvalConfig) -> UserConfig:
    try:
        return UserConfig.parse(config.user, model=config.user_model, api_key_env=config.user_api_key_env,
                                temperature=config.user_temperature)
    except ValueError as exc:
        raise SetupError(f"--user: {exc}") from None


class SetupError(Exception):
    """Something to fix before a run can start (a message for the user, not a traceback)."""


class Interrupted(Exception):
    """Ctrl-C during a run: carries (summary, records, run) of the episodes that finished."""

    def __init__(self, *partial: Any):
        super().__init__("interrupted")
        self.partial = partial


def check_setup(config: EvalConfig) -> None:
    """Fail in a second, with the fix, on what would otherwise cost a run of infrastructure errors or a traceback:
    no Docker daemon, an endpoint that does not answer, a bad sample count."""
    if config.samples < 1:
        raise SetupError(f"--samples must be at least 1, not {config.samples}")
    if config.policy == "hf" and config.model:
        check_model_folder(config.model, "--model ")
    user = user_config(config)
    if user.kind == "hf":
        check_model_folder(user.target, "--user hf:")
    if config.sandbox == "docker":
        from seal_envs.sandbox.base import SandboxError
        from seal_envs.sandbox.docker import daemon_address, docker_client

        try:
            docker_client().ping()
        except SandboxError:
            raise SetupError(
                f"the tools run in Docker sandboxes, but no Docker daemon answers at {daemon_address()}.\n"
                "Start Docker (Linux: `sudo systemctl start docker`, or `sudo dockerd &`; macOS/Windows: start Docker "
                "Desktop), or point DOCKER_HOST at a running daemon; add your user to the `docker` group if the "
                "socket is not yours. Only for tool code you trust: --sandbox inprocess runs the tools without "
                "Docker.") from None
    if config.policy == "openai" and config.base_url:
        check_endpoint(config.base_url, "--base-url ")
    if user.kind == "openai":
        check_endpoint(user.target, "--user openai:")


def check_model_folder(model: str, flag: str) -> None:
    folder = Path(model).expanduser()
    if (folder.is_absolute() or model.startswith(".") or folder.exists()) and not (folder / "config.json").is_file():
        raise SetupError(f"{flag}{model}: no Hugging Face model folder there (a folder with config.json, e.g. "
                         "seal-train's global_step_<N>/actor/huggingface)")


def check_endpoint(base_url: str, flag: str) -> None:
    try:
        urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=10).close()
    except urllib.error.HTTPError:
        pass  # it answers (e.g. 401 or 404 for /models): the requests will say more
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SetupError(f"{flag}{base_url} does not answer ({reason}). Start the server (e.g. `vllm serve MODEL`) or "
                         "fix the URL: an OpenAI-compatible endpoint ending in /v1, such as "
                         "http://localhost:8000/v1") from None


def _journal_records(out: Path, run: dict[str, str]) -> dict[tuple[str, int], Any]:
    """The finished episodes of the run in ``out`` (``--resume``), keyed by (task id, sample); refuses a folder
    that holds another benchmark's or policy's run."""
    from seal_envs.evaluation.runner import EpisodeRecord

    header_file, journal = out / RUN_FILE, out / JOURNAL_FILE
    if not header_file.is_file():
        raise SetupError(f"--resume: {out} holds no run to continue (no {RUN_FILE}); run without --resume")
    before = json.loads(header_file.read_text())
    for key in ("name", "benchmark"):
        if before.get(key) != run[key]:
            raise SetupError(f"--resume: {out} holds a run of {key} {before.get(key)!r}, not {run[key]!r}; use "
                             "another --out or the same options")
    done = {}
    if journal.is_file():
        for line in journal.read_text().splitlines():
            if line.strip():
                try:
                    record = EpisodeRecord.from_json(json.loads(line))
                except (ValueError, TypeError, KeyError):
                    continue  # a line cut by a kill: that episode is played again
                if not record.infrastructure_error:
                    done[(record.task_id, record.sample)] = record
    return done


def evaluate(config: EvalConfig, progress: bool = True):
    """Run the configured tasks (``config.samples`` episodes each), appending each finished episode to
    ``<out>/episodes.jsonl``; returns (summary, records, run) where ``run`` names the policy, the benchmark and the
    date. On Ctrl-C the finished episodes stay in the journal (``--resume`` continues)."""
    from seal_envs.bfcl.checker import official_verdict
    from seal_envs.evaluation.report import summarize
    from seal_envs.evaluation.runner import run_episodes
    from seal_envs.evaluation.tau2 import tau2_verdict
    from seal_envs.sandbox import SandboxConfig
    from seal_envs.spec.loader import load_domain
    from seal_envs.users import UserError
    from seal_envs.users.backends import served_model

    target = eval_target(config)
    tau2 = any(task.metadata.get("checker") == "tau2" for task in target.tasks)
    user = target.env_kwargs.get("user", user_config(config))
    if user.kind == "openai" and user.model is None:  # the report names the model the endpoint served
        try:
            user = replace(user, model=served_model(user))
        except UserError as exc:
            raise SetupError(f"--user: {exc}") from None
    run = {"name": config.model or config.policy, "benchmark": target.benchmark,
           "date": datetime.datetime.now().isoformat(timespec="seconds"), "user": user.describe(tau2)}
    out = Path(config.out)
    done = _journal_records(out, run) if config.resume else {}
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_FILE).write_text(json.dumps({**run, "config": asdict(config)}, indent=1))
    journal_path = out / JOURNAL_FILE
    journal_path.write_text("".join(json.dumps(r.to_json(), default=str) + "\n" for r in done.values()))
    jobs = [(task, sample) for task in target.tasks for sample in range(config.samples)]
    todo = [(task, sample) for task, sample in jobs if (task.id, sample) not in done]
    if config.resume:
        print(f"seal-eval: resuming: {len(jobs) - len(todo)} of {len(jobs)} episodes already done, {len(todo)} to "
              "play", file=sys.stderr)

    with journal_path.open("a") as journal:
        def finished(index: int, record) -> None:
            task, record.sample = todo[index]
            checker = task.metadata.get("checker")
            if config.official_check and record.task_error is None and not record.infrastructure_error:
                if checker == "bfcl":  # BFCL's checker runs its backends in-process: serially
                    record.official_valid = bool(official_verdict(task, record.calls)["valid"])
                elif checker == "tau2":
                    record.official_valid = tau2_verdict(task, record.calls, record.messages, load_domain(
                        config.domain or task.domain), SandboxConfig(backend=config.sandbox),
                        record.termination)["reward"] == 1.0
                record.official_checker = checker if record.official_valid is not None else None
            done[(task.id, record.sample)] = record
            journal.write(json.dumps(record.to_json(), default=str) + "\n")
            journal.flush()

        try:
            run_episodes([task for task, _ in todo], target.make_env, policy_factory(config), config.workers,
                         progress, on_finish=finished)
        except KeyboardInterrupt:
            records = [done[(t.id, s)] for t, s in jobs if (t.id, s) in done]
            raise Interrupted(summarize(records, run["user"]), records, run) from None
    records = [done[(t.id, s)] for t, s in jobs]
    return summarize(records, run["user"]), records, run


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
    parser.add_argument("--samples", type=int, default=1,
                        help="episodes per task (k); reports pass@k with its standard error over tasks")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out: play only the episodes its episodes.jsonl lacks")
    parser.add_argument("--transcripts", type=int, default=2, help="episodes printed in full at the end (0: none)")
    parser.add_argument("--user", default="scripted",
                        help="who plays the user: scripted (the tasks' fixed turns), openai:<base_url> or "
                             "hf:<model folder> (an LLM user simulator on tau2's protocol; tasks with a user "
                             "scenario, e.g. --domain tau2_airline)")
    parser.add_argument("--user-model", help="--user openai: the served model (default: the endpoint's only one)")
    parser.add_argument("--user-api-key-env", default="OPENAI_API_KEY",
                        help="--user openai: the environment variable holding its API key")
    parser.add_argument("--user-temperature", type=float, default=0.0, help="the LLM user's temperature (tau2: 0)")
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
    from gymnasium.error import Error as GymError

    from seal_envs.evaluation.report import format_table, format_transcript, pick_transcripts, write_results

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    config = EvalConfig(**vars(build_parser().parse_args(argv)))
    try:
        check_setup(config)
        summary, records, run = evaluate(config)
    except Interrupted as stop:
        summary, records, run = stop.partial
        results, _ = write_results(Path(config.out), summary, records, asdict(config), run)
        print(f"\nseal-eval: interrupted; {len(records)} finished episode(s) kept in {results}; continue with the "
              "same command and --resume", file=sys.stderr)
        return 130
    except (SetupError, ValueError, GymError) as exc:  # a setup to fix, options the env refuses, an unknown --env
        print(f"seal-eval: {exc}", file=sys.stderr)
        return 1
    print(format_table(summary))
    shown = pick_transcripts(records, config.transcripts)
    if shown:
        print(f"\n{len(shown)} of {len(records)} transcripts (failures first; every one is in results.json):")
        print("\n".join(format_transcript(record) for record in shown))
    results, chart = write_results(Path(config.out), summary, records, asdict(config), run)
    print(f"\nAverage {summary['average']:.2f} (macro) | {summary['micro_average']:.2f} over {summary['episodes']} "
          f"episodes (micro); wrote {results} and {chart}")
    if summary["infrastructure_errors"]:
        print(f"seal-eval: {summary['infrastructure_errors']} of {summary['episodes']} episodes ended in an "
              "infrastructure error (our sandbox failed, not the policy) and count as failures above; rerun with "
              "--resume to play them again", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
