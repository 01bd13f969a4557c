"""Turn-level diagnosis: one label and one tag per user turn, by deterministic rules over executable evidence.

The evidence is what actually happened (parser result, schema check, execution outcome, the verifier's
state and output comparison), never a model's opinion. The *tag* is the paper's vocabulary, set by its released
code's rules: it keys the trainer's advantage weights and the interface's guidelines. The *label* is ours and says
more precisely what went wrong (a malformed call, a schema violation, an unrecovered error): it keys the schema
cues and error hints and is what reports show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from seal_envs.task import ToolCall, Turn


class Label(str, Enum):
    """Turn labels (ours: why a turn failed, finer than the paper's tags). Where several apply, the rule order in
    ``diagnose_turn`` decides."""

    INVALID_TOOL_CALL = "invalid_tool_call"
    ARGUMENT_MISMATCH = "argument_mismatch"
    STATE_MISMATCH = "state_mismatch"
    INSTANCE_MISMATCH = "instance_mismatch"
    RECOVERY_FAILURE = "recovery_failure"
    MISSING_TOOL_CALL = "missing_tool_call"
    RESPONSE_MISMATCH = "response_mismatch"
    SPURIOUS_TOOL_CALL = "spurious_tool_call"
    CORRECT_ABSTENTION = "correct_abstention"
    EMPTY_TURN_MODEL_RESPONSE = "empty_turn_model_response"
    NOT_REACHED = "not_reached"  # the episode ended (step cap, response budget) before this turn was played
    PASS = "pass"
    # Faults that are not the agent's: never diagnosed as mistakes, masked out of training.
    INFRASTRUCTURE_ERROR = "infrastructure_error"
    TASK_ERROR = "task_error"


class Tag(str, Enum):
    """The paper's per-turn tags (its released code's BFCL-checker vocabulary), set by the reference's rules.

    Every turn gets one beside its ``Label``. The advantage weights (rho) and the guidelines are keyed by tags, as
    in the reference; ``docs/labels.md`` maps each label to the tags it can carry."""

    PASS = "pass"
    CORRECT_ABSTENTION = "correct_abstention"
    SPURIOUS_TOOL_CALL = "spurious_tool_call"
    EMPTY_TURN_MODEL_RESPONSE = "empty_turn_model_response"
    INSTANCE_MISMATCH = "instance_mismatch"
    STATE_MISMATCH = "state_mismatch"
    RESPONSE_MISMATCH = "response_mismatch"
    GT_ERROR = "gt_error"  # the ground truth cannot be executed (our task_error)
    CHECKER_ERROR = "checker_error"  # the reference's checker raised; we have no such case, kept for its configs
    INFRASTRUCTURE_ERROR = "infrastructure_error"  # ours: the sandbox failed


NON_AGENT_LABELS = frozenset({Label.INFRASTRUCTURE_ERROR, Label.TASK_ERROR})
"""Labels that reflect our sandbox or a broken task/ground truth: excluded from reweighting and profiles."""

FAILURE_LABELS = frozenset(Label) - NON_AGENT_LABELS - {Label.PASS, Label.CORRECT_ABSTENTION}

EXCLUDED_TAGS = frozenset({Tag.GT_ERROR, Tag.CHECKER_ERROR, Tag.INFRASTRUCTURE_ERROR})
"""Tags that say nothing about the policy: left out of the weight sum and of every profile share."""

SUCCESS_TAGS = frozenset({Tag.PASS, Tag.CORRECT_ABSTENTION})

Outcome = Literal["ok", "parse_error", "unknown_tool", "invalid_arguments", "execution_error", "infrastructure_error"]


@dataclass(frozen=True)
class CallRecord:
    """One attempted call within a turn, with what happened to it."""

    step: int
    outcome: Outcome
    call: ToolCall | None = None  # None when the block did not parse
    mutates_state: bool = True
    violations: tuple[dict[str, Any], ...] = ()  # schema violations: {"kind": "missing"|"unknown"|"type"|"enum", ...}
    error: str | None = None
    output: Any = None
    backend: str | None = None  # the backend class the call ran on ("module:Class"); None when nothing ran


@dataclass(frozen=True)
class TurnVerdict:
    """The verifier's comparison of one turn against the ground-truth replay."""

    state_matches: bool
    outputs_match: bool
    response_matches: bool
    abstention_ok: bool = True  # a turn with no ground-truth call was answered in text, without calling a tool
    state_diff: tuple[str, ...] = ()  # paths of state that differ (evidence; never shown to the policy)
    missing_outputs: int = 0

    @property
    def passed(self) -> bool:
        return self.state_matches and self.outputs_match and self.response_matches and self.abstention_ok


@dataclass(frozen=True)
class TurnEvidence:
    turn_index: int
    turn: Turn
    records: tuple[CallRecord, ...]
    final_response: str
    verdict: TurnVerdict
    step_cap_hit: bool = False
    ground_truth_backends: frozenset[str] = frozenset()  # backend classes the ground truth's calls run on


@dataclass(frozen=True)
class Diagnosis:
    turn_index: int
    label: Label
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    tag: Tag = Tag.INFRASTRUCTURE_ERROR

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn_index, "label": self.label.value, "tag": self.tag.value, "reason": self.reason,
                "evidence": self.evidence}


def _recovered(records: tuple[CallRecord, ...]) -> bool:
    """Every failed tool was later called successfully in the same turn."""
    for i, record in enumerate(records):
        if record.outcome == "ok" or record.call is None:
            continue
        name = record.call.name
        if not any(r.outcome == "ok" and r.call is not None and r.call.name == name for r in records[i + 1:]):
            return False
    return True


def _expects_abstention(turn: Turn) -> bool:
    return turn.expects_abstention or not turn.ground_truth


def _instances_differ(ev: TurnEvidence) -> bool:
    """The backend classes the agent's calls ran on are not the ground truth's (the reference's instance check)."""
    touched = {r.backend for r in ev.records if r.backend is not None}
    return bool(touched) and bool(ev.ground_truth_backends) and touched != set(ev.ground_truth_backends)


def reference_tag(ev: TurnEvidence) -> Tag:
    """The turn's tag by the reference's rules (``multi_turn_progress.py``), in its order.

    A turn without ground-truth calls: ``spurious_tool_call`` if any call decoded, else ``correct_abstention``.
    Otherwise: no decoded call (none made, or only unparseable blocks) ``empty_turn_model_response``; then
    ``pass`` when the verifier passed; then instance, state and response mismatch. (The reference tests the
    instance sets before ``pass``; its sets only differ when execution raises, so that order never matters there.
    Ours compares the classes the calls touched, and a passing turn stays ``pass``.)"""
    if any(r.outcome == "infrastructure_error" for r in ev.records):
        return Tag.INFRASTRUCTURE_ERROR
    decoded = any(r.call is not None for r in ev.records)
    if _expects_abstention(ev.turn):
        return Tag.SPURIOUS_TOOL_CALL if decoded else Tag.CORRECT_ABSTENTION
    if not decoded:
        return Tag.EMPTY_TURN_MODEL_RESPONSE
    if ev.verdict.passed:
        return Tag.PASS
    if _instances_differ(ev):
        return Tag.INSTANCE_MISMATCH
    if not ev.verdict.state_matches:
        return Tag.STATE_MISMATCH
    return Tag.RESPONSE_MISMATCH


def unreached_tag(turn: Turn) -> Tag:
    """The reference pads turns an episode never reached with an empty response: this is the tag that gets."""
    return Tag.CORRECT_ABSTENTION if _expects_abstention(turn) else Tag.EMPTY_TURN_MODEL_RESPONSE


def _violation_text(violations: Iterable[dict[str, Any]]) -> str:
    rules = {"missing": "is missing", "unknown": "is not accepted", "type": "has the wrong type",
             "enum": "is not an allowed value"}
    return "; ".join(f"'{v.get('argument')}' {rules.get(v.get('kind'), 'breaks the schema')}" for v in violations)


def diagnose_turn(ev: TurnEvidence) -> Diagnosis:
    """Label one turn (our rules, first match wins) and tag it (the reference's rules, ``reference_tag``)."""
    records, verdict = ev.records, ev.verdict
    outcomes = Counter(r.outcome for r in records)
    evidence: dict[str, Any] = {
        "calls": len(records),
        "outcomes": dict(outcomes),
        "state_matches": verdict.state_matches,
        "outputs_match": verdict.outputs_match,
        "response_matches": verdict.response_matches,
        "abstention_ok": verdict.abstention_ok,
        "state_diff": list(verdict.state_diff),
        "step_cap_hit": ev.step_cap_hit,
    }
    tag = reference_tag(ev)

    def result(label: Label, reason: str) -> Diagnosis:
        return Diagnosis(ev.turn_index, label, reason, evidence, tag)

    if outcomes["infrastructure_error"]:
        return result(Label.INFRASTRUCTURE_ERROR, "the sandbox failed during the turn")
    answered = bool(ev.final_response.strip())
    if _expects_abstention(ev.turn):
        if records:
            return result(Label.SPURIOUS_TOOL_CALL, "this turn needs no call (no tool fits, or a value is "
                                                    "missing and must be asked for), but the agent called one")
        if not answered:
            return result(Label.EMPTY_TURN_MODEL_RESPONSE, "the agent gave no answer")
        if verdict.passed:
            return result(Label.CORRECT_ABSTENTION, "the agent answered in text without calling a tool")
        return result(Label.RESPONSE_MISMATCH, "the agent answered in text, but the answer fails the verifier")
    if not records and not answered:
        return result(Label.EMPTY_TURN_MODEL_RESPONSE, "the agent gave neither a tool call nor an answer")
    if verdict.passed:
        return result(Label.PASS, "state, outputs and answer match the ground truth")
    if outcomes["parse_error"] or outcomes["unknown_tool"]:
        return result(Label.INVALID_TOOL_CALL, "a tool call did not parse or named an unavailable tool")
    violations = [v for r in records for v in r.violations]
    if outcomes["invalid_arguments"] or violations:
        return result(Label.ARGUMENT_MISMATCH, "a call violated its tool's schema: " + _violation_text(violations)
                      if violations else "a call failed on invalid arguments")
    executed = [r for r in records if r.outcome == "ok"]
    if not verdict.state_matches and executed:
        if _instances_differ(ev):
            return result(Label.INSTANCE_MISMATCH, "the calls ran on other backend classes than the ground truth's")
        return result(Label.STATE_MISMATCH, "calls executed but the state differs from the ground truth's")
    if outcomes["execution_error"] and not _recovered(records):
        return result(Label.RECOVERY_FAILURE, "a call failed and the agent did not recover within the turn")
    if ev.turn.ground_truth and {c.name for c in ev.turn.ground_truth} - {r.call.name for r in executed}:
        return result(Label.MISSING_TOOL_CALL, "the agent answered without the calls the turn needed")
    return result(Label.RESPONSE_MISMATCH, "the state is right but the outputs or answer fail the verifier")


def not_reached(turn_index: int, turn: Turn, reason: str) -> Diagnosis:
    """The diagnosis of a turn the episode never reached (tagged as the reference pads it)."""
    return Diagnosis(turn_index, Label.NOT_REACHED, reason, {}, unreached_tag(turn))


def fault(turn_index: int, label: Label, reason: str) -> Diagnosis:
    """An episode ended by a fault that is not the agent's (``infrastructure_error`` or ``task_error``)."""
    if label not in NON_AGENT_LABELS:
        raise ValueError(f"{label.value} is an agent label; faults are {sorted(x.value for x in NON_AGENT_LABELS)}")
    return Diagnosis(turn_index, label, reason, {},
                     Tag.GT_ERROR if label is Label.TASK_ERROR else Tag.INFRASTRUCTURE_ERROR)


def label_counts(labels: Iterable[Label | str | Diagnosis]) -> Counter[str]:
    """Count labels (from diagnoses, labels or label names); the failure profile's raw form."""
    counts: Counter[str] = Counter()
    for item in labels:
        label = item.label if isinstance(item, Diagnosis) else Label(item)
        counts[label.value] += 1
    return counts


def check_names(names: Iterable[str], vocabulary: Iterable[type[Enum]], what: str) -> None:
    """Refuse names (e.g. config keys) that the ``vocabulary`` enums do not know, naming them and the valid ones."""
    known = {member.value for enum in vocabulary for member in enum}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))}; valid: {', '.join(sorted(known))}")


__all__ = [
    "CallRecord", "Diagnosis", "EXCLUDED_TAGS", "FAILURE_LABELS", "Label", "NON_AGENT_LABELS", "SUCCESS_TAGS", "Tag",
    "TurnEvidence", "TurnVerdict", "check_names", "diagnose_turn", "fault", "label_counts", "not_reached",
    "reference_tag", "unreached_tag",
]
