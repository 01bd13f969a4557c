"""The evolvable learning interface: o~ = o + phi_schema + phi_err + phi_cap (training only).

- phi_schema: public schema facts made explicit in the tool descriptions ("[required]", allowed enum values,
  optionally types) plus one instruction in the system prompt.
- phi_err: on a failed call, a recovery hint naming the error class and the violated constraint.
- phi_cap: behavioural guidelines in the system prompt, chosen by the dominant failure tags.

Which cues are active is selected from a failure profile (turn counts and mean rewards per label and tag over
recent rollouts), never by task instance, and no cue is ever derived from ground truth. The defaults are the
paper's released configuration: schema cues from the start, a guideline for a failure tag whose share among
failure tags is >= 0.10, seen >= 8 times, with mean reward < 0.6 (at most 3), error hints off. Evaluation envs
use ``InterfaceState()`` (all off), which renders exactly the original interface.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from seal_envs.diagnosis import (
    EXCLUDED_TAGS, NON_AGENT_LABELS, SUCCESS_TAGS, CallRecord, Diagnosis, Label, Tag, check_names,
)
from seal_envs.formats.hermes import HERMES
from seal_envs.spec.loader import ToolSpec

SCHEMA_INSTRUCTION = (
    "Always provide every parameter marked [required], use only the listed allowed values, and never call "
    "a function that is not in the provided list."
)
GUIDELINES: dict[Tag, str] = {
    Tag.SPURIOUS_TOOL_CALL: "If no available function fits the request, answer in plain text instead of calling one.",
    Tag.EMPTY_TURN_MODEL_RESPONSE: "When an available function can carry out the request, call it rather than only answering in text.",
    Tag.STATE_MISMATCH: "Re-read the latest tool results before making a call that changes state.",
    Tag.INSTANCE_MISMATCH: "Only act on targets (ids, names, paths) that appeared in the request or in tool results.",
    Tag.RESPONSE_MISMATCH: "Match the format and content the user asked for in your final answer.",
}
SCHEMA_LABELS = frozenset({Label.INVALID_TOOL_CALL, Label.ARGUMENT_MISMATCH})
ERROR_LABELS = frozenset({Label.INVALID_TOOL_CALL, Label.ARGUMENT_MISMATCH, Label.RECOVERY_FAILURE})
NOT_FAILURE_LABELS = NON_AGENT_LABELS | {Label.PASS, Label.CORRECT_ABSTENTION}
NOT_FAILURE_TAGS = EXCLUDED_TAGS | SUCCESS_TAGS

CueMode = Literal["always", "on_failure", "never"]


@dataclass(frozen=True)
class EvolutionConfig:
    """How ``evolve`` picks cues. A failure kind *qualifies* when its share among failure turns is >= ``min_share``,
    its count >= ``min_count`` and the mean reward of the rollouts it occurred in < ``max_reward``.

    ``schema_cues`` and ``error_hints``: ``always``, ``on_failure`` (when the schema labels, resp. the error labels
    together qualify) or ``never``. Guidelines: the qualifying failure tags with a guideline, highest
    share * (1 - mean reward) first, at most ``max_guidelines``."""

    schema_cues: CueMode = "always"
    error_hints: CueMode = "never"
    min_share: float = 0.10
    min_count: int = 8
    max_reward: float = 0.6
    max_guidelines: int = 3
    annotate_types: bool = False

    def __post_init__(self):
        for name in ("schema_cues", "error_hints"):
            if getattr(self, name) not in ("always", "on_failure", "never"):
                raise ValueError(f"EvolutionConfig.{name} must be 'always', 'on_failure' or 'never', "
                                 f"not {getattr(self, name)!r}")


@dataclass(frozen=True)
class KindStats:
    """Turns of one label or tag in a profile, and the summed 0/1 reward of the rollouts they occurred in."""

    count: int = 0
    reward_sum: float = 0.0

    @property
    def reward_mean(self) -> float:
        return self.reward_sum / self.count if self.count else 0.0

    def __add__(self, other: KindStats) -> KindStats:
        return KindStats(self.count + other.count, self.reward_sum + other.reward_sum)


def _add(into: dict[str, KindStats], name: str, reward: float) -> None:
    into[name] = into.get(name, KindStats()) + KindStats(1, float(reward))


@dataclass(frozen=True)
class FailureProfile:
    """C_t: per label and per tag, how many turns of the window's rollouts had it and their rollouts' mean reward.

    Turns of faults that are not the agent's (infrastructure, task) are left out."""

    labels: dict[str, KindStats] = field(default_factory=dict)
    tags: dict[str, KindStats] = field(default_factory=dict)

    @classmethod
    def from_rollouts(cls, rollouts: Iterable[tuple[Sequence[str], Sequence[str], float]]) -> FailureProfile:
        """From ``(turn labels, turn tags, reward)`` per rollout; every turn counts, with its rollout's reward."""
        labels: dict[str, KindStats] = {}
        tags: dict[str, KindStats] = {}
        for turn_labels, turn_tags, reward in rollouts:
            for name in turn_labels:
                if Label(name) not in NON_AGENT_LABELS:
                    _add(labels, Label(name).value, reward)
            for name in turn_tags:
                if Tag(name) not in EXCLUDED_TAGS:
                    _add(tags, Tag(name).value, reward)
        return cls(dict(sorted(labels.items())), dict(sorted(tags.items())))

    @classmethod
    def of(cls, diagnoses: FailureInput) -> FailureProfile:
        """A profile from a profile, from diagnoses, or from counts of label/tag names (rewards unknown: counted
        as failing rollouts, reward 0)."""
        if isinstance(diagnoses, FailureProfile):
            return diagnoses
        if isinstance(diagnoses, Mapping):
            counts = Counter({str(k): int(v) for k, v in diagnoses.items()})
        else:
            counts = Counter()
            tag_counts: Counter[str] = Counter()
            for item in diagnoses:
                if isinstance(item, Diagnosis):
                    counts[item.label.value] += 1
                    tag_counts[item.tag.value] += 1
                else:
                    counts[Label(item).value] += 1
            if tag_counts:
                return cls._from_counts(counts, tag_counts)
        check_names(counts, (Label, Tag), "label or tag")
        labels = {k for k in counts if k in Label._value2member_map_}
        tags = {k for k in counts if k in Tag._value2member_map_}
        return cls._from_counts(Counter({k: counts[k] for k in labels}), Counter({k: counts[k] for k in tags}))

    @classmethod
    def _from_counts(cls, labels: Counter[str], tags: Counter[str]) -> FailureProfile:
        return cls({k: KindStats(v) for k, v in sorted(labels.items()) if v > 0 and Label(k) not in NON_AGENT_LABELS},
                   {k: KindStats(v) for k, v in sorted(tags.items()) if v > 0 and Tag(k) not in EXCLUDED_TAGS})

    def __add__(self, other: FailureProfile) -> FailureProfile:
        def merged(a: dict[str, KindStats], b: dict[str, KindStats]) -> dict[str, KindStats]:
            return {k: a.get(k, KindStats()) + b.get(k, KindStats()) for k in sorted(set(a) | set(b))}
        return FailureProfile(merged(self.labels, other.labels), merged(self.tags, other.tags))

    def counts(self) -> dict[str, int]:
        """Label counts (the profile's short form in logs)."""
        return {k: v.count for k, v in self.labels.items()}

    def to_json(self) -> dict[str, Any]:
        return {kind: {k: {"count": v.count, "reward_sum": v.reward_sum} for k, v in stats.items()}
                for kind, stats in (("labels", self.labels), ("tags", self.tags))}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FailureProfile:
        return cls({Label(k).value: KindStats(int(v["count"]), float(v["reward_sum"]))
                    for k, v in doc.get("labels", {}).items()},
                   {Tag(k).value: KindStats(int(v["count"]), float(v["reward_sum"])) for k, v in doc.get("tags", {}).items()})


FailureInput = FailureProfile | Mapping[str, int] | Iterable[Diagnosis | Label | str]


def failure_profile(diagnoses: FailureInput) -> FailureProfile:
    """The failure profile of diagnoses, counts or a profile (see ``FailureProfile.of``)."""
    return FailureProfile.of(diagnoses)


@dataclass(frozen=True)
class InterfaceState:
    """Which training-time cues are active. ``InterfaceState()`` is the original interface."""

    schema_cues: bool = False
    error_hints: bool = False
    guidelines: tuple[str, ...] = ()  # tag names, in order of pressure
    version: int = 0
    profile: dict[str, Any] = field(default_factory=dict)  # FailureProfile.to_json() of the profile that made it
    config: EvolutionConfig = field(default_factory=EvolutionConfig)

    @classmethod
    def initial(cls, config: EvolutionConfig = EvolutionConfig()) -> InterfaceState:
        """The training interface before any profile: the cues ``config`` turns on ``always``."""
        return cls(schema_cues=config.schema_cues == "always", error_hints=config.error_hints == "always",
                   config=config)

    @property
    def is_original(self) -> bool:
        return not (self.schema_cues or self.error_hints or self.guidelines)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | str) -> InterfaceState:
        doc = json.loads(doc) if isinstance(doc, str) else dict(doc)
        return cls(
            schema_cues=bool(doc.get("schema_cues", False)),
            error_hints=bool(doc.get("error_hints", False)),
            guidelines=tuple(Tag(g).value for g in doc.get("guidelines", ())),
            version=int(doc.get("version", 0)),
            profile=FailureProfile.from_json(doc.get("profile") or {}).to_json(),
            config=EvolutionConfig(**doc.get("config", {})),
        )


def _qualifies(stats: KindStats, failures: int, cfg: EvolutionConfig) -> bool:
    return (stats.count >= cfg.min_count and failures > 0 and stats.count / failures >= cfg.min_share
            and stats.reward_mean < cfg.max_reward)


def _cue(mode: CueMode, labels: dict[str, KindStats], kinds: frozenset[Label], failures: int,
         cfg: EvolutionConfig) -> bool:
    if mode != "on_failure":
        return mode == "always"
    stats = sum((labels.get(k.value, KindStats()) for k in kinds), KindStats())
    return _qualifies(stats, failures, cfg)


def evolve(state: InterfaceState, diagnoses: FailureInput) -> InterfaceState:
    """Omega_{t+1} = Evolve(Omega_t, C_t): select the cues for the qualifying failure kinds of the profile."""
    profile = FailureProfile.of(diagnoses)
    cfg = state.config
    label_failures = sum(v.count for k, v in profile.labels.items() if Label(k) not in NOT_FAILURE_LABELS)
    tag_failures = sum(v.count for k, v in profile.tags.items() if Tag(k) not in NOT_FAILURE_TAGS)
    pressing = [(stats.count / tag_failures * (1.0 - stats.reward_mean), tag)
                for tag, stats in profile.tags.items()
                if Tag(tag) in GUIDELINES and _qualifies(stats, tag_failures, cfg)]
    pressing.sort(key=lambda item: (-item[0], item[1]))
    return InterfaceState(
        schema_cues=_cue(cfg.schema_cues, profile.labels, SCHEMA_LABELS, label_failures, cfg),
        error_hints=_cue(cfg.error_hints, profile.labels, ERROR_LABELS, label_failures, cfg),
        guidelines=tuple(tag for _, tag in pressing[: cfg.max_guidelines]),
        version=state.version + 1,
        profile=profile.to_json(),
        config=cfg,
    )


# ----------------------------------------------------------------------------------------- rendering


def _annotate_property(prop: dict[str, Any], required: bool, types: bool) -> dict[str, Any]:
    notes = []
    if types and "type" in prop:
        kind = prop["type"] if isinstance(prop["type"], str) else " or ".join(prop["type"])
        notes.append(f"Type: {kind}.")
    if "enum" in prop:
        notes.append("Allowed values: " + ", ".join(str(v) for v in prop["enum"]) + ".")
    description = prop.get("description", "").strip()
    words = (["[required]"] if required else []) + ([description] if description else []) + notes
    return {**prop, "description": " ".join(words)}


def render_tool(tool: ToolSpec, state: InterfaceState) -> dict[str, Any]:
    """The tool's schema as the policy sees it, in the OpenAI ``tools=`` format."""
    schema = tool.openai_schema()
    if not state.schema_cues:
        return schema
    params = copy.deepcopy(tool.parameters)
    required = set(params.get("required", ()))
    params["properties"] = {
        name: _annotate_property(prop, name in required, state.config.annotate_types)
        for name, prop in params.get("properties", {}).items()
    }
    schema["function"]["parameters"] = params
    return schema


def render_system_prompt(base: str | None, state: InterfaceState) -> str | None:
    """The base system prompt plus the schema instruction and guidelines that are active."""
    extra = ([SCHEMA_INSTRUCTION] if state.schema_cues else []) + [GUIDELINES[Tag(g)] for g in state.guidelines]
    if not extra:
        return base
    block = "Guidelines:\n" + "\n".join(f"- {line}" for line in extra)
    return f"{base}\n\n{block}" if base else block


def render_error_hint(record: CallRecord, available: Sequence[str], state: InterfaceState,
                      call_example: str = HERMES.example) -> str | None:
    """A recovery hint for a failed call: the error class and the violated constraint, never an answer.

    ``call_example``: the shape of one call in the env's tool format, quoted after a parse error."""
    if not state.error_hints or record.outcome in ("ok", "infrastructure_error"):
        return None
    tools = ", ".join(available) if available else "(none)"
    if record.outcome == "parse_error":
        return (f"Hint (parse error): write each call exactly as {call_example}. Available functions: {tools}. "
                "If no function fits, answer in plain text.")
    if record.outcome == "unknown_tool":
        return f"Hint (unavailable function): only these functions exist: {tools}. If none fits, answer in plain text."
    parts = []
    for v in record.violations:
        if v["kind"] == "missing":
            parts.append(f"required argument '{v['argument']}' is missing")
        elif v["kind"] == "unknown":
            parts.append(f"argument '{v['argument']}' is not accepted by this function")
        elif v["kind"] == "type":
            parts.append(f"argument '{v['argument']}' must be of type {v['expected']}")
        elif v["kind"] == "enum":
            parts.append(f"argument '{v['argument']}' must be one of the allowed values listed in the schema")
        else:
            parts.append(f"argument '{v.get('argument')}' violates the schema: {v.get('message', '')}")
    if parts:
        return "Hint (argument error): " + "; ".join(parts) + ". Fix the call and try again."
    return ("Hint (execution error): the function raised an error. Check the arguments against the schema and the "
            "latest tool results; do not repeat the same call unchanged.")


__all__ = [
    "EvolutionConfig", "FailureProfile", "GUIDELINES", "InterfaceState", "KindStats", "evolve", "failure_profile",
    "render_error_hint", "render_system_prompt", "render_tool",
]
