"""Check a composed ``seal-train`` configuration in the parent process, in milliseconds, before anything slow
starts (model conversion, the warm start, Ray, the child process): a typo must cost a message, not minutes and
a traceback from inside a Ray worker."""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path
from typing import Any

from seal_trainer.advantage import ReweightConfig
from seal_trainer.config import ABLATIONS, DatasetConfig, EnvDefaults, SealConfig
from seal_trainer.warm_start import WarmStartConfig

SANDBOXES = ("docker", "inprocess")
RHO_MODES = ("fixed", "dynamic")
_SECTIONS: dict[str, type] = {"reweighting": ReweightConfig, "env": EnvDefaults, "warm_start": WarmStartConfig,
                              "dataset": DatasetConfig}


class ConfigError(ValueError):
    """A configuration that cannot train; the message lists every problem with its fix."""


def _one_of(key: str, value: Any, allowed: Any) -> str:
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{key}={value!r} is not one of {', '.join(map(str, allowed))}{hint}"


def _unknown_keys(node: dict[str, Any], schema: type, prefix: str) -> list[str]:
    """Keys the dataclass does not have: SealConfig would ignore them silently (``+seal.typo=1`` composes)."""
    names = [f.name for f in fields(schema)]
    problems = []
    for key, value in node.items():
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            problems.append(f"{prefix}{key} is not a key of {prefix[:-1]}" +
                            (f" (did you mean {prefix}{close[0]}?)" if close else f"; known: {', '.join(names)}"))
        elif key in _SECTIONS and isinstance(value, dict):
            problems += _unknown_keys(value, _SECTIONS[key], f"{prefix}{key}.")
    return problems


def _model_problem(seal: SealConfig, model_path: str) -> str | None:
    from seal_trainer.models import NAMED_MODELS, SMOLLM2, gguf_path

    if model_path != "auto":  # a path or a hub name given to verl directly: verl loads it
        return None
    if seal.model == SMOLLM2:
        try:
            gguf_path()
        except FileNotFoundError as exc:
            return f"seal.model={SMOLLM2}: {exc}"
        return None
    if seal.model in NAMED_MODELS or (Path(seal.model).expanduser() / "config.json").is_file():
        return None
    folder = Path(seal.model).expanduser()
    why = "has no config.json" if folder.is_dir() else "does not exist"
    return (f"seal.model={seal.model!r} is neither a named model ({', '.join(NAMED_MODELS)}) nor a Hugging Face "
            f"folder: {folder} {why}")


def _domain_problems(seal: SealConfig) -> list[str]:
    import gymnasium as gym

    import seal_envs  # noqa: F401  (registers the env ids)
    from seal_envs.formats import get_tool_format
    from seal_envs.spec import load_domain

    problems = []
    try:
        load_domain(seal.domain)
    except (ValueError, OSError) as exc:
        problems.append(f"seal.domain={seal.domain!r} does not load: {exc}")
    try:
        get_tool_format(seal.tool_format)
    except ValueError as exc:
        problems.append(f"seal.tool_format: {exc}")
    env_id = seal.dataset.env_id
    if env_id:
        try:
            gym.spec(env_id)
        except gym.error.Error as exc:
            problems.append(f"seal.dataset.env_id={env_id!r}: {exc}")
        else:
            from seal_envs.bfcl.protocol import BFCL

            if "BFCL" in env_id and seal.tool_format != BFCL.decodes:
                problems.append(f"seal.tool_format={seal.tool_format!r}: {env_id} decodes calls in BFCL's own "
                                f"{BFCL.decodes!r} format (to score exactly as BFCL does); use "
                                f"seal.tool_format={BFCL.decodes}")
    return problems


def check_config(cfg: Any) -> None:
    """Raise ``ConfigError`` listing every problem of the ``seal`` block (and the keys of verl's config that SEAL
    resolves) that would otherwise fail later: unknown keys, ablation, rho, sandbox, tool format, domain, model."""
    from omegaconf import DictConfig, OmegaConf

    from seal_trainer.config import seal_config_from

    node = cfg.get("seal", None)
    doc = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    problems = _unknown_keys(doc, SealConfig, "seal.")
    try:
        seal = seal_config_from(cfg)
    except (TypeError, ValueError) as exc:
        raise ConfigError("\n  ".join(["the seal configuration is not valid:", *problems, str(exc)])) from None
    if seal.ablation not in ABLATIONS:
        problems.append(_one_of("seal.ablation", seal.ablation, ABLATIONS))
    if seal.reweighting.rho not in RHO_MODES:
        problems.append(_one_of("seal.reweighting.rho", seal.reweighting.rho, RHO_MODES))
    if seal.env.sandbox not in (None, *SANDBOXES):
        problems.append(_one_of("seal.env.sandbox", seal.env.sandbox, SANDBOXES))
    problems += _domain_problems(seal)
    model = _model_problem(seal, str(cfg.actor_rollout_ref.model.path))
    if model:
        problems.append(model)
    if problems:
        raise ConfigError("\n  ".join(["the configuration cannot train:", *problems]))


__all__ = ["ConfigError", "check_config"]
