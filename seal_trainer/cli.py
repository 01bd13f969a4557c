"""``seal-train``: SEAL GRPO training on verl.

    seal-train                                  # embedded default: SmolLM2-135M, warm start, full SEAL on shop
    seal-train seal.ablation=vanilla trainer.total_training_steps=5
    seal-train seal.model=tiny seal.warm_start.steps=0          # the random tiny model (seconds, learns nothing)
    seal-train --config examples/seal_bfcl_qwen7b.yaml      # the paper recipe (GPUs, vLLM)
    seal-train --print-config                   # show the composed config and exit
    seal-train -v                               # show verl's and Ray's whole output, not only SEAL's lines

Arguments of the form ``key=value`` are Hydra overrides of the composed config (verl's ``ppo_trainer`` +
the SEAL config). ``--config`` takes a yaml (name in ``seal_trainer/config`` or a path) composed the same way.

Values ``auto`` are resolved here, before training starts: ``actor_rollout_ref.model.path=auto`` is
``seal.model`` (``seal_trainer.models``: ``smollm2-135m``, ``tiny`` or a folder), warm-started for
``seal.warm_start.steps`` SFT steps (``seal_trainer.warm_start``), both cached in ``$SEAL_CACHE_DIR`` (default
``~/.cache/seal``); ``data.*_files=auto`` writes parquet files from ``seal.domain``'s tasks (a split too small
to train on is an error, one smaller than asked for a warning); ``trainer.default_local_dir=auto`` is
``./seal_runs/<experiment_name>``, ``trainer.rollout_data_dir=auto`` its ``rollouts`` folder. Without CUDA
devices the CPU shims (``seal_trainer.cpu``) are switched on.

Ray: ``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address`` joins that cluster (checked first: ``seal_trainer.cluster``);
otherwise verl starts a local Ray instance of the run's own (``address=local``), whatever other
clusters run on the machine.

Training runs in a child process (``run_ppo(config, task_runner_class=SealTaskRunner)``) whose whole output
goes to ``<run dir>/train.log``; the console shows SEAL's lines (one per step, held-out success before and
after, the final policy's Hugging Face folder) and, on failure, the log's tail. The run folder also gets
``config.yaml`` (the resolved config), ``seal_steps.jsonl``, ``training.png`` and the checkpoint
(``global_step_<N>/actor/huggingface`` with the embedded default's ``save_contents: [hf_model]``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "config"
DEFAULT_CONFIG = "seal_cpu"
HEARTBEAT_S = 60.0  # seconds without a [seal] line before the console says the run is still alive


def _config_location(name: str) -> tuple[Path, str]:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path.resolve().parent, path.stem
    if (CONFIG_DIR / f"{name}.yaml").exists():
        return CONFIG_DIR, name
    raise SystemExit(f"seal-train: no config {name!r} (a .yaml path or one of "
                     f"{sorted(p.stem for p in CONFIG_DIR.glob('*.yaml'))})")


def compose(config: str = DEFAULT_CONFIG, overrides: list[str] | None = None, cpu: bool | None = None):
    """Compose verl's ppo_trainer + a SEAL yaml + overrides (CPU overrides first when no GPU)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from seal_trainer import cpu as cpu_mod
    from seal_trainer.config import REPLACED_DOMAIN_KEYS, replaced_domain_key_error

    for override in overrides or []:
        key, _, value = override.lstrip("+~").partition("=")
        if key in REPLACED_DOMAIN_KEYS:
            raise SystemExit(f"seal-train: {replaced_domain_key_error(key, value)}")
    if cpu is None:
        cpu = not cpu_mod.gpu_available()
    all_overrides = (cpu_mod.cpu_overrides() if cpu else []) + list(overrides or [])
    directory, name = _config_location(config)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(directory), version_base=None):
        cfg = hydra_compose(config_name=name, overrides=all_overrides)
    return cfg


def resolve_auto(cfg) -> None:
    """Fill in the ``auto`` values (output dir, data files, then the model: a split too small to train on fails
    before minutes of model preparation)."""
    from omegaconf import open_dict

    from seal_envs.formats import get_tool_format
    from seal_trainer.config import seal_config_from

    seal = seal_config_from(cfg)
    tool_format = get_tool_format(seal.tool_format)  # an unknown name fails here, before minutes of preparation
    with open_dict(cfg):
        if str(cfg.trainer.default_local_dir) == "auto":
            cfg.trainer.default_local_dir = str((Path("seal_runs") / str(cfg.trainer.experiment_name)).resolve())
        if str(cfg.trainer.get("rollout_data_dir")) == "auto":  # what the model did: one jsonl per step
            cfg.trainer.rollout_data_dir = str(Path(cfg.trainer.default_local_dir) / "rollouts")
        if "auto" in (str(cfg.data.train_files), str(cfg.data.val_files)):
            from seal_trainer.data import write_domain_dataset

            ds = seal.dataset
            out = Path(cfg.trainer.default_local_dir) / "data" if ds.out_dir in (None, "auto") else Path(ds.out_dir)
            train, val = write_domain_dataset(seal.domain, out, n_train=ds.n_train, n_val=ds.n_val,
                                              sandbox=seal.env.sandbox, env_id=ds.env_id,
                                              batch_size=int(cfg.data.train_batch_size))
            if str(cfg.data.train_files) == "auto":
                cfg.data.train_files = str(train.resolve())
            if str(cfg.data.val_files) == "auto":
                cfg.data.val_files = str(val.resolve())
        if str(cfg.actor_rollout_ref.model.path) == "auto":
            from seal_trainer.models import resolve_model
            from seal_trainer.warm_start import warm_started_model

            path = resolve_model(seal.model, domain=seal.domain)
            if seal.warm_start.steps > 0:
                path = warm_started_model(path, seal.domain, seal.warm_start, tool_format=tool_format)
            print(f"[seal] model: {path}", flush=True)
            cfg.actor_rollout_ref.model.path = str(path)


def final_policy(run_dir: Path) -> Path | None:
    """The Hugging Face folder of the last checkpoint verl wrote in ``run_dir``, if it holds weights (a LoRA run's
    adapters merged into them: ``seal_trainer.checkpoint``)."""
    from seal_trainer.checkpoint import policy_folder

    latest = run_dir / "latest_checkpointed_iteration.txt"  # verl's record of its last checkpoint
    if not latest.exists():
        return None
    return policy_folder(run_dir / f"global_step_{latest.read_text().strip()}" / "actor")


def launch(cfg) -> None:
    """Validate and run: ``run_ppo(config, task_runner_class=SealTaskRunner)``."""
    from seal_trainer import cpu as cpu_mod

    if str(cfg.trainer.device) == "cpu":
        cpu_mod.activate()
    import seal_trainer.plugin  # noqa: F401  (registrations in the driver, before verl reads the config)
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from seal_trainer.task_runner import SealTaskRunner

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    from seal_trainer.cluster import release_sandboxes

    try:
        run_ppo(cfg, task_runner_class=SealTaskRunner)
    finally:  # finished, failed or a node lost: no sandbox outlives the job on any live node
        release_sandboxes()


def _uses_docker(cfg) -> bool:
    from seal_trainer.config import seal_config_from

    return seal_config_from(cfg).env.sandbox in (None, "docker")


def _check_sandbox_backend(cfg) -> None:
    """Fail before minutes of model preparation when the Docker daemon the envs need is not there (a local Ray
    instance: this machine's; on a cluster ``join_cluster`` asks every node)."""
    if not _uses_docker(cfg):
        return
    from seal_envs.sandbox.docker import docker_client
    from seal_envs.sandbox.base import SandboxError

    try:
        docker_client().ping()
    except SandboxError as exc:
        raise SystemExit(f"seal-train: the tools run in Docker (seal.env.sandbox=docker) but {exc}\n"
                         "Run it as `bash scripts/with-docker.sh seal-train ...` (starts a private daemon), or pass "
                         "seal.env.sandbox=inprocess to run the tools in-process.") from None


def _quiet_imports() -> None:
    """Hide what importing verl says about optional engines and accelerators it does not find: harmless here."""
    import warnings

    from seal_trainer import cpu as cpu_mod

    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    os.environ.setdefault("VERL_LOGGING_LEVEL", "WARN")
    if not cpu_mod.gpu_available():
        cpu_mod.activate()  # verl then takes the CPU platform instead of warning that no accelerator is there


# Ray prefixes forwarded lines with "(ActorName pid=123)" and colour codes
_RAY_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)*\([^)]*pid=\d+[^)]*\)(\x1b\[[0-9;]*m)*\s*")


def run_child(config_path: Path, log_path: Path, verbose: bool) -> int:
    """Train in a child process; everything it prints goes to ``log_path``, SEAL's lines also to the console."""
    from seal_trainer.cluster import oom_kills

    cmd = [sys.executable, "-m", "seal_trainer.cli", "--run-resolved", str(config_path)]
    last_shown, lines, killed, done = [time.monotonic()], [0], [0], threading.Event()

    def heartbeat() -> None:  # a CPU step can take many minutes of rollouts: show that the run is alive
        while not done.wait(HEARTBEAT_S):
            if time.monotonic() - last_shown[0] >= HEARTBEAT_S and not verbose:
                oom = f"; Ray killed {killed[0]} worker(s) for lack of memory" if killed[0] else ""
                print(f"[seal] still running: {time.monotonic() - last_shown[0]:.0f} s since the last step line, "
                      f"{lines[0]} lines of verl/Ray output so far ({log_path}){oom}", flush=True)

    with open(log_path, "w") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                      text=True, errors="replace", bufsize=1) as child:
        threading.Thread(target=heartbeat, daemon=True, name="seal-heartbeat").start()
        try:
            for line in child.stdout:
                log.write(line)
                lines[0] += 1
                text = _RAY_PREFIX.sub("", line)
                kills = oom_kills(text)
                if kills and not killed[0]:  # Ray retries what it killed without end: the run may stall, say why
                    print(f"[seal] Ray's memory monitor killed {kills[0]} worker(s) of this run on node {kills[1]}: "
                          "the machine's memory in use is above Ray's threshold (whoever holds it), and Ray retries "
                          "such tasks without end, so the run waits until memory is freed; free memory, or start Ray "
                          "with a higher RAY_memory_usage_threshold", flush=True)
                killed[0] += kills[0] if kills else 0
                if verbose:
                    sys.stdout.write(line)
                elif text.startswith("[seal]"):
                    sys.stdout.write(text)
                    sys.stdout.flush()
                    last_shown[0] = time.monotonic()
        except KeyboardInterrupt:
            child.terminate()
            raise
        finally:
            done.set()
        return child.wait()


def _tail(path: Path, n: int = 40) -> str:
    return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-n:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seal-train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="SEAL yaml (name or path); default: seal_cpu")
    parser.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    parser.add_argument("--cpu", action="store_true", default=None, help="force the CPU shims")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the whole output of verl and Ray")
    parser.add_argument("--run-resolved", type=Path, help=argparse.SUPPRESS)  # the child: train from a resolved yaml
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP; why: seal_trainer.cpu.CPU_ENV
    if args.run_resolved:
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(args.run_resolved)
        launch(cfg)
        return 0
    if not (os.environ.get("CUDA_VISIBLE_DEVICES") or "").strip() and args.cpu:
        os.environ["VERL_PLATFORM"] = "cpu"
    if not args.verbose:
        _quiet_imports()
    from hydra.errors import HydraException

    from seal_trainer.preflight import check_config
    try:
        cfg = compose(args.config, args.overrides, cpu=args.cpu)
    except HydraException as exc:  # e.g. an override of a key the config does not have
        raise SystemExit(f"seal-train: {exc}") from None
    if args.print_config:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(cfg))
        return 0
    t0 = time.time()
    from seal_trainer.cluster import ClusterError, cluster_address, join_cluster

    try:
        check_config(cfg)
        if cluster_address(cfg) is None:
            _check_sandbox_backend(cfg)
        # RAY_ADDRESS / ray_kwargs.ray_init.address: checked before minutes of preparation
        address = join_cluster(cfg, docker=_uses_docker(cfg))
        resolve_auto(cfg)
    except (ValueError, ClusterError) as exc:  # a config or cluster that cannot train: say what to fix
        raise SystemExit(f"seal-train: {exc}") from None
    if address is not None:
        print(f"[seal] joining the Ray cluster at {address}", flush=True)
    from omegaconf import OmegaConf

    run_dir = Path(cfg.trainer.default_local_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path, log_path = run_dir / "config.yaml", run_dir / "train.log"
    OmegaConf.save(cfg, config_path)
    print(f"[seal] training {cfg.trainer.total_training_steps} step(s); verl/Ray output: {log_path}", flush=True)
    code = run_child(config_path, log_path, args.verbose)
    if code != 0:
        print(f"[seal] training failed (exit {code}); last lines of {log_path}:\n{_tail(log_path)}", file=sys.stderr)
        from seal_trainer.cluster import lost_node

        node = lost_node(log_path.read_text(errors="replace"))
        if node is not None:
            print(f"[seal] training failed because Ray node {node} died (its raylet or machine was lost); verl does "
                  "not retry a step: resume from the last checkpoint with trainer.resume_mode=auto (optimizer state "
                  "in actor_rollout_ref.actor.checkpoint.save_contents)", file=sys.stderr)
        return code
    from seal_trainer.report import plot_run, summary

    steps_log = Path((cfg.get("seal", {}) or {}).get("log_path") or run_dir / "seal_steps.jsonl")
    if steps_log.exists():
        seal = cfg.get("seal", {}) or {}
        png = plot_run(steps_log, run_dir / "training.png", title=f"seal-train {cfg.trainer.experiment_name}: "
                       f"{seal.get('model', '')}, {seal.get('ablation', 'full')} SEAL, {time.strftime('%Y-%m-%d')}")
        heldout = " -> ".join(f"{v:.3f} (step {s})" for s, v in summary(steps_log)["heldout"]) or "not run"
        print(f"[seal] held-out success: {heldout}; plot {png}", flush=True)
    policy = final_policy(run_dir)
    if policy is not None:
        print(f"[seal] final policy: {policy}  (seal-eval --policy hf --model {policy})", flush=True)
    print(f"[seal] done in {time.time() - t0:.0f} s; run folder {run_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
