"""``seal-train``: SEAL GRPO training on verl.

    seal-train                                  # embedded CPU default: tiny local model, shop tools, 3 steps
    seal-train seal.ablation=vanilla trainer.total_training_steps=5
    seal-train --config examples/seal_bfcl_qwen7b.yaml      # the paper recipe (GPUs, vLLM)
    seal-train --print-config                   # show the composed config and exit

Arguments of the form ``key=value`` are Hydra overrides of the composed config (verl's ``ppo_trainer`` +
the SEAL config). ``--config`` takes a yaml (name in ``seal_trainer/config`` or a path) composed the same way.

Values ``auto`` are resolved here: ``actor_rollout_ref.model.path=auto`` builds the tiny Qwen2 model and
tokenizer (``seal_trainer.tiny``) in ``$SEAL_CACHE_DIR`` (default ``~/.cache/seal``); ``data.*_files=auto``
writes parquet files from ``seal.dataset.domain``'s tasks; ``trainer.default_local_dir=auto`` is
``./seal_runs/<experiment_name>``. Without CUDA devices the CPU shims (``seal_trainer.cpu``) are switched on.
Launch: ``verl.trainer.main_ppo.run_ppo(config, task_runner_class=SealTaskRunner)``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "config"
DEFAULT_CONFIG = "seal_cpu"


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

    if cpu is None:
        cpu = not cpu_mod.gpu_available()
    all_overrides = (cpu_mod.cpu_overrides() if cpu else []) + list(overrides or [])
    directory, name = _config_location(config)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(directory), version_base=None):
        cfg = hydra_compose(config_name=name, overrides=all_overrides)
    return cfg


def resolve_auto(cfg) -> None:
    """Fill in the ``auto`` values (model, data files, output dir)."""
    from omegaconf import open_dict

    seal = cfg.get("seal", {}) or {}
    with open_dict(cfg):
        if str(cfg.trainer.default_local_dir) == "auto":
            cfg.trainer.default_local_dir = str(Path("seal_runs") / str(cfg.trainer.experiment_name))
        if str(cfg.actor_rollout_ref.model.path) == "auto":
            from seal_trainer.tiny import build_tiny_model

            tiny = seal.get("tiny_model", {}) or {}
            t0 = time.time()
            domain = str((seal.get("dataset", {}) or {}).get("domain", "shop"))
            path = build_tiny_model(domains=(domain,), warm_start_steps=int(tiny.get("warm_start_steps", 0)))
            print(f"[seal] tiny model: {path} ({time.time() - t0:.1f}s)", flush=True)
            cfg.actor_rollout_ref.model.path = str(path)
        if "auto" in (str(cfg.data.train_files), str(cfg.data.val_files)):
            from seal_trainer.data import write_domain_dataset

            ds = seal.get("dataset", {}) or {}
            out = ds.get("out_dir", "auto")
            out = Path(cfg.trainer.default_local_dir) / "data" if out in (None, "auto") else Path(out)
            train, val = write_domain_dataset(str(ds.get("domain", "shop")), out, n_train=ds.get("n_train"),
                                              n_val=ds.get("n_val"), sandbox=(seal.get("env", {}) or {}).get("sandbox"),
                                              env_id=ds.get("env_id"))
            if str(cfg.data.train_files) == "auto":
                cfg.data.train_files = str(train.resolve())
            if str(cfg.data.val_files) == "auto":
                cfg.data.val_files = str(val.resolve())


def launch(cfg) -> None:
    """Validate and run: ``run_ppo(config, task_runner_class=SealTaskRunner)``."""
    from seal_trainer import cpu as cpu_mod

    if str(cfg.trainer.device) == "cpu":
        cpu_mod.activate()
    import seal_trainer.plugin  # noqa: F401  (registrations in the driver, before verl reads the config)
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from seal_trainer.trainer import SealTaskRunner

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    run_ppo(cfg, task_runner_class=SealTaskRunner)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seal-train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="SEAL yaml (name or path); default: seal_cpu")
    parser.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    parser.add_argument("--cpu", action="store_true", default=None, help="force the CPU shims")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    args = parser.parse_args(argv)
    if not (os.environ.get("CUDA_VISIBLE_DEVICES") or "").strip() and args.cpu:
        os.environ["VERL_PLATFORM"] = "cpu"
    cfg = compose(args.config, args.overrides, cpu=args.cpu)
    if str(cfg.trainer.device) == "cpu":
        from seal_trainer import cpu as cpu_mod

        cpu_mod.activate()  # before verl's platform singleton is created in this process
    if args.print_config:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(cfg))
        return 0
    resolve_auto(cfg)
    t0 = time.time()
    launch(cfg)
    print(f"[seal] training finished in {time.time() - t0:.1f}s; per-step log: "
          f"{Path(cfg.trainer.default_local_dir) / 'seal_steps.jsonl'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
