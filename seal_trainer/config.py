"""SEAL's trainer options (the ``seal:`` block of the Hydra config) and the ablation presets.

=====================  =====================  ===========  ====================  =========
``seal.ablation``      interface_evolution    reweighting  closed_loop_update    rho
=====================  =====================  ===========  ====================  =========
``full`` (default)     on                     on           on                    dynamic
``vanilla``            off                    off          off                   -
``no_evolution``       off                    on           on (nothing to evolve) dynamic
``no_reweighting``     on                     off          on                    -
``fixed_rho``          on                     on           on                    fixed
``no_closed_loop``     on                     on           off: fixed after the  dynamic
                                                           first profile
=====================  =====================  ===========  ====================  =========

``full`` is the reference's "Full SEAL" (schema cues from the start, guidelines from the diagnosed failures,
dynamic rho); ``no_evolution``, ``no_reweighting`` and ``fixed_rho`` are its ablations (no schema cues, no
reweighting, no dynamic rho). ``vanilla`` is GRPO as verl computes it, except that infrastructure failures stay
masked out of the groups. Explicit ``seal.interface_evolution`` / ``seal.reweighting.enable`` /
``seal.closed_loop_update`` values override the preset; ``seal.interface.*`` sets the evolution thresholds
(``seal_envs.interface.EvolutionConfig``).

``seal.domain`` is the one key that picks the tool domain: the envs, the dataset written for
``data.*_files=auto`` and the warm start's demonstrations all use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from seal_envs.formats import DEFAULT_TOOL_FORMAT
from seal_envs.interface import EvolutionConfig
from seal_trainer.advantage import ReweightConfig
from seal_trainer.warm_start import WarmStartConfig

ABLATIONS: dict[str, dict[str, bool]] = {
    "full": dict(interface_evolution=True, reweighting=True, closed_loop_update=True),
    "vanilla": dict(interface_evolution=False, reweighting=False, closed_loop_update=False),
    "no_evolution": dict(interface_evolution=False, reweighting=True, closed_loop_update=True),
    "no_reweighting": dict(interface_evolution=True, reweighting=False, closed_loop_update=True),
    "fixed_rho": dict(interface_evolution=True, reweighting=True, closed_loop_update=True),
    "no_closed_loop": dict(interface_evolution=True, reweighting=True, closed_loop_update=False),
}
FIXED_RHO_ABLATIONS = frozenset({"fixed_rho"})


# keys that once named the domain separately for the envs and the dataset; ``seal.domain`` replaced both
REPLACED_DOMAIN_KEYS = ("seal.env.domain", "seal.dataset.domain")


@dataclass
class EnvDefaults:
    """Defaults for rows that do not name them (``seal_*`` dataset columns win)."""

    sandbox: str | None = "docker"
    max_steps_per_turn: int | None = 20


@dataclass
class DatasetConfig:
    """The parquet files written for ``data.*_files=auto`` from ``seal.domain``'s tasks (``seal_trainer.data``)."""

    n_train: int | None = None  # None: all of the domain's training split
    n_val: int | None = None
    out_dir: str = "auto"  # auto: <trainer.default_local_dir>/data
    env_id: str | None = None  # a registered env id the rows name (its own tasks), e.g. seal/BFCL-v3-MultiTurn-v0


@dataclass
class SealConfig:
    model: str = "smollm2-135m"  # used where actor_rollout_ref.model.path=auto (seal_trainer.models)
    tool_format: str = DEFAULT_TOOL_FORMAT  # how the policy writes tool calls (seal_envs.formats): env, agent loop, warm start
    domain: str = "shop"  # a bundled domain's name or a tools.json folder: envs, dataset and warm start
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    ablation: str = "full"
    interface_evolution: bool | None = None
    closed_loop_update: bool | None = None
    reweighting: ReweightConfig = field(default_factory=ReweightConfig)
    interface: EvolutionConfig = field(default_factory=EvolutionConfig)  # evolve's thresholds and cue modes
    env: EnvDefaults = field(default_factory=EnvDefaults)
    env_pool_size: int = 64
    max_assistant_turns: int = 0  # 0: only the env's caps and the response budget stop an episode
    max_message_tokens: int = 0  # tokens per assistant message; one cut there ends the episode (0: the budget)
    profile_window: int = 0  # failure profile over the current epoch's rollouts (0, the reference) or the last N steps
    # a step none of whose rows has a gradient runs no optimizer step: verl's Adam would still move the weights by
    # its momentum (about 0.9 of the last update), and with 2 prompts per step half the steps have no gradient
    skip_gradientless_updates: bool = True
    log_path: str | None = None  # JSONL per step; default <trainer.default_local_dir>/seal_steps.jsonl
    print_steps: bool = True

    def resolved(self) -> dict[str, bool]:
        if self.ablation not in ABLATIONS:
            raise ValueError(f"seal.ablation must be one of {sorted(ABLATIONS)}, not {self.ablation!r}")
        preset = dict(ABLATIONS[self.ablation])
        if self.interface_evolution is not None:
            preset["interface_evolution"] = bool(self.interface_evolution)
        if self.closed_loop_update is not None:
            preset["closed_loop_update"] = bool(self.closed_loop_update)
        if self.ablation != "full" and "reweighting" in preset:
            self.reweighting.enable = preset["reweighting"] and self.reweighting.enable
        if self.ablation in FIXED_RHO_ABLATIONS:
            self.reweighting.rho = "fixed"
        preset["reweighting"] = self.reweighting.enable
        return preset

    def env_defaults(self) -> dict[str, Any]:
        """What an env is built with where its dataset row does not say (``seal_trainer.agent_loop``)."""
        return {k: v for k, v in {"domain": self.domain, "tool_format": self.tool_format, **asdict(self.env)}.items()
                if v is not None}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def replaced_domain_key_error(key: str, value: Any) -> str:
    return (f"{key} is replaced by seal.domain, the one key for the envs, the dataset and the warm start: "
            f"set seal.domain={value} and remove {key}")


def seal_config_from(cfg: Any) -> SealConfig:
    """Build a ``SealConfig`` from the ``seal`` node of an OmegaConf/dict config (missing keys: defaults)."""
    from omegaconf import DictConfig, OmegaConf

    node = cfg.get("seal", None) if cfg is not None else None
    if node is None:
        return SealConfig()
    doc = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    for key in REPLACED_DOMAIN_KEYS:
        section = doc.get(key.split(".")[1]) or {}
        if "domain" in section:
            raise ValueError(replaced_domain_key_error(key, section["domain"]))
    sections = {name: _section(cls, doc.pop(name, None), f"seal.{name}") for name, cls in (
        ("reweighting", ReweightConfig), ("env", EnvDefaults), ("warm_start", WarmStartConfig),
        ("dataset", DatasetConfig), ("interface", EvolutionConfig))}
    return _section(SealConfig, {**doc, **sections}, "seal")


def _section(cls: type, doc: dict[str, Any] | None, where: str) -> Any:
    """``cls(**doc)``, with a key the dataclass does not have reported by name (a typo must not be ignored)."""
    doc = dict(doc or {})
    unknown = sorted(set(doc) - set(cls.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown key {', '.join(f'{where}.{k}' for k in unknown)}; valid: "
                         f"{', '.join(sorted(cls.__dataclass_fields__))}")
    return cls(**doc)


__all__ = ["ABLATIONS", "REPLACED_DOMAIN_KEYS", "DatasetConfig", "EnvDefaults", "SealConfig",
           "replaced_domain_key_error", "seal_config_from"]
