"""The evolvable learning interface: o~ = o + phi_schema + phi_err + phi_cap (training only).

- phi_schema: public schema facts made explicit in the tool descriptions ("[required]", allowed enum values,
  types) plus one instruction in the system prompt.
- phi_err: on a failed call, a recovery hint naming the error class and the violated constraint.
- phi_cap: behavioural guidelines in the system prompt, chosen by the dominant failure types.

Which cues are active is selected from a failure profile (label counts over recent rollouts), never by task
instance, and no cue is ever derived from ground truth. Evaluation envs use ``InterfaceState()`` (all off),
which renders exactly the original interface.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from seal_envs.diagnosis import NON_AGENT_LABELS, CallRecord, Diagnosis, Label, label_counts
from seal_envs.formats.hermes import HERMES
from seal_envs.spec.loader import ToolSpec

SCHEMA_INSTRUCTION = (
    "Always provide every parameter marked [required], use only the listed allowed values, and never call "
    "a function that is not in the provided list."
)
GUIDELINES: dict[Label, str] = {
    Label.SPURIOUS_TOOL_CALL: "If no available function fits the request, answer in plain text instead of calling one.",
    Label.MISSING_TOOL_CALL: "When an available function can carry out the request, call it rather than only answering in text.",
    Label.STATE_MISMATCH: "Re-read the latest tool results before making a call that changes state.",
    Label.INSTANCE_MISMATCH: "Only act on targets (ids, names, paths) that appeared in the request or in tool results.",
    Label.RESPONSE_MISMATCH: "Match the format and content the user asked for in your final answer.",
}
SCHEMA_LABELS = frozenset({Label.INVALID_TOOL_CALL, Label.ARGUMENT_MISMATCH})
ERROR_LABELS = frozenset({Label.INVALID_TOOL_CALL, Label.ARGUMENT_MISMATCH, Label.RECOVERY_FAILURE})


@dataclass(frozen=True)
class EvolutionConfig:
    """Thresholds of ``evolve``: a cue turns on when its failure types reach ``min_share`` of labelled turns."""

    min_share: float = 0.05
    max_guidelines: int = 2
    annotate_types: bool = False


@dataclass(frozen=True)
class InterfaceState:
    """Which training-time cues are active. ``InterfaceState()`` is the original interface."""

    schema_cues: bool = False
    error_hints: bool = False
    guidelines: tuple[str, ...] = ()  # label names, in order of dominance
    version: int = 0
    profile: dict[str, int] = field(default_factory=dict)  # the failure profile that produced this state
    config: EvolutionConfig = field(default_factory=EvolutionConfig)

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
            guidelines=tuple(Label(g).value for g in doc.get("guidelines", ())),
            version=int(doc.get("version", 0)),
            profile={Label(k).value: int(v) for k, v in doc.get("profile", {}).items()},
            config=EvolutionConfig(**doc.get("config", {})),
        )


FailureInput = Mapping[str, int] | Iterable[Diagnosis | Label | str]


def failure_profile(diagnoses: FailureInput) -> dict[str, int]:
    """Label counts of agent-attributable turns (infrastructure and task faults left out)."""
    counts = Counter({Label(k).value: int(v) for k, v in diagnoses.items()}) if isinstance(diagnoses, Mapping) \
        else label_counts(diagnoses)
    return {k: v for k, v in sorted(counts.items()) if Label(k) not in NON_AGENT_LABELS and v > 0}


def evolve(state: InterfaceState, diagnoses: FailureInput) -> InterfaceState:
    """Omega_{t+1} = Evolve(Omega_t, C_t): select the cues for the dominant failure types of the profile."""
    profile = failure_profile(diagnoses)
    total = sum(profile.values())
    if total == 0:
        return replace(state, version=state.version + 1, profile=profile)
    share = {Label(k): v / total for k, v in profile.items()}
    cfg = state.config

    def reaches(labels: Iterable[Label]) -> bool:
        return sum(share.get(label, 0.0) for label in labels) >= cfg.min_share

    behavioural = sorted((lab for lab in GUIDELINES if share.get(lab, 0.0) >= cfg.min_share),
                         key=lambda lab: (-share[lab], lab.value))
    return InterfaceState(
        schema_cues=reaches(SCHEMA_LABELS),
        error_hints=reaches(ERROR_LABELS),
        guidelines=tuple(lab.value for lab in behavioural[: cfg.max_guidelines]),
        version=state.version + 1,
        profile=profile,
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
    extra = ([SCHEMA_INSTRUCTION] if state.schema_cues else []) + [GUIDELINES[Label(g)] for g in state.guidelines]
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
    "EvolutionConfig", "GUIDELINES", "InterfaceState", "evolve", "failure_profile",
    "render_error_hint", "render_system_prompt", "render_tool",
]
