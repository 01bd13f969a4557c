"""Turn-level diagnosis: one label per user turn, by deterministic rules over executable evidence.

The evidence is what actually happened (parser result, schema check, execution outcome, the verifier's
state and output comparison), never a model's opinion. The label drives both the interface evolution
(``seal_envs.interface``) and the trainer's advantage reweighting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from seal_envs.task import ToolCall, Turn


class Label(str, Enum):
    """Turn labels. Where several apply, the first in ``PRIORITY`` wins."""

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
    PASS = "pass"
    # Faults that are not the agent's: never diagnosed as mistakes, masked out of training.
    INFRASTRUCTURE_ERROR = "infrastructure_error"
    TASK_ERROR = "task_error"


NON_AGENT_LABELS = frozenset({Label.INFRASTRUCTURE_ERROR, Label.TASK_ERROR})
"""Labels that reflect our sandbox or a broken task/ground truth: excluded from reweighting and profiles."""

FAILURE_LABELS = frozenset(Label) - NON_AGENT_LABELS - {Label.PASS, Label.CORRECT_ABSTENTION}

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


@dataclass(frozen=True)
class TurnVerdict:
    """The verifier's comparison of one turn against the ground-truth replay."""

    state_matches: bool
    outputs_match: bool
    response_matches: bool
    abstention_ok: bool = True  # a turn with no ground-truth call was answered without calling a tool
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


@dataclass(frozen=True)
class Diagnosis:
    turn_index: int
    label: Label
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn_index, "label": self.label.value, "reason": self.reason, "evidence": self.evidence}


def _recovered(records: tuple[CallRecord, ...]) -> bool:
    """Every failed tool was later called successfully in the same turn."""
    for i, record in enumerate(records):
        if record.outcome == "ok" or record.call is None:
            continue
        name = record.call.name
        if not any(r.outcome == "ok" and r.call is not None and r.call.name == name for r in records[i + 1:]):
            return False
    return True


def _same_tools(records: tuple[CallRecord, ...], ground_truth: tuple[ToolCall, ...]) -> bool:
    """The agent ran the ground truth's state-changing tools, so a state mismatch means wrong targets."""
    called = Counter(r.call.name for r in records if r.outcome == "ok" and r.call is not None and r.mutates_state)
    return bool(called) and set(called) >= {c.name for c in ground_truth}


def diagnose_turn(ev: TurnEvidence, mutating_tools: frozenset[str] | None = None) -> Diagnosis:
    """Label one turn. ``mutating_tools`` limits the instance check to state-changing ground-truth calls."""
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

    def result(label: Label, reason: str) -> Diagnosis:
        return Diagnosis(ev.turn_index, label, reason, evidence)

    if outcomes["infrastructure_error"]:
        return result(Label.INFRASTRUCTURE_ERROR, "the sandbox failed during the turn")
    if ev.turn.expects_abstention or not ev.turn.ground_truth:
        if records:
            return result(Label.SPURIOUS_TOOL_CALL, "this turn needs no call (no tool fits, or a value is "
                                                    "missing and must be asked for), but the agent called one")
        if not ev.final_response.strip():
            return result(Label.EMPTY_TURN_MODEL_RESPONSE, "the agent gave no answer")
        return result(Label.CORRECT_ABSTENTION, "the agent answered in text without calling a tool")
    if not records and not ev.final_response.strip():
        return result(Label.EMPTY_TURN_MODEL_RESPONSE, "the agent gave neither a tool call nor an answer")
    if verdict.passed:
        return result(Label.PASS, "state, outputs and answer match the ground truth")
    if outcomes["parse_error"] or outcomes["unknown_tool"]:
        return result(Label.INVALID_TOOL_CALL, "a tool call did not parse or named an unavailable tool")
    if outcomes["invalid_arguments"] or any(r.violations for r in records):
        return result(Label.ARGUMENT_MISMATCH, "a call violated its tool's schema")
    executed = [r for r in records if r.outcome == "ok"]
    if not verdict.state_matches and executed:
        gt = tuple(c for c in ev.turn.ground_truth if mutating_tools is None or c.name in mutating_tools)
        if gt and _same_tools(records, gt):
            return result(Label.INSTANCE_MISMATCH, "the right tools ran on the wrong targets")
        return result(Label.STATE_MISMATCH, "calls executed but the state differs from the ground truth's")
    if outcomes["execution_error"] and not _recovered(records):
        return result(Label.RECOVERY_FAILURE, "a call failed and the agent did not recover within the turn")
    if ev.turn.ground_truth and {c.name for c in ev.turn.ground_truth} - {r.call.name for r in executed}:
        return result(Label.MISSING_TOOL_CALL, "the agent answered without the calls the turn needed")
    return result(Label.RESPONSE_MISMATCH, "the state is right but the outputs or answer fail the verifier")


def label_counts(labels: Iterable[Label | str | Diagnosis]) -> Counter[str]:
    """Count labels (from diagnoses, labels or label names); the failure profile's raw form."""
    counts: Counter[str] = Counter()
    for item in labels:
        label = item.label if isinstance(item, Diagnosis) else Label(item)
        counts[label.value] += 1
    return counts


__all__ = [
    "CallRecord", "Diagnosis", "FAILURE_LABELS", "Label", "NON_AGENT_LABELS", "TurnEvidence", "TurnVerdict",
    "diagnose_turn", "label_counts",
]
