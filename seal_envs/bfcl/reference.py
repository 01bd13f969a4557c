"""BFCL's own pipeline with a SEAL policy as the model: the reference that eval mode is measured against.

``bfcl_pipeline(task, policy)`` runs BFCL's multi-turn FC inference loop (``BaseHandler.inference_multi_turn_FC``:
its turns, holdout functions, decoding, execution, result messages and force-quit) on BFCL's own test entry,
asking ``policy`` for each completion, and scores the raw completions as BFCL's evaluation does (decode every
step with the handler, drop empty or undecodable steps, then the official ``multi_turn_checker``). The handler
around the loop is the smallest possible: an OpenAI-style message list (BFCL's ``convert_to_tool`` for the
tools), assistant messages kept as the raw completion, one tool message per execution result, and BFCL's
Hermes/Qwen handler for decoding. Every request the loop makes is hashed like ``seal-eval`` hashes its own.
"""

from __future__ import annotations

import contextlib
import copy
import io
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from bfcl_eval.constants.enums import ModelStyle
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
from bfcl_eval.model_handler.base_handler import BaseHandler
from bfcl_eval.model_handler.utils import convert_to_tool
from bfcl_eval.utils import load_dataset_entry

from seal_envs.bfcl.checker import forget_instances, official_verdict
from seal_envs.bfcl.decoding import bfcl_calls, model_response, qwen_handler
from seal_envs.evaluation.fingerprint import RequestLog
from seal_envs.evaluation.policies import Policy
from seal_envs.task import Task


@cache
def _entries(category: str) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in load_dataset_entry(f"multi_turn_{category}")}


def test_entry(task: Task) -> dict[str, Any]:
    """BFCL's prepared test entry for a task (functions with its hint, missed functions held out): a fresh copy."""
    return copy.deepcopy(_entries(task.category)[task.id])


class ScriptedHandler(BaseHandler):
    """A BFCL handler whose model is a SEAL policy; it records every request the loop sends."""

    def __init__(self, policy: Policy, model_name: str) -> None:
        super().__init__(model_name, temperature=0.0, registry_name=model_name, is_fc_model=True)
        self.model_style = ModelStyle.OPENAI_COMPLETIONS
        self.policy = policy
        self.requests = RequestLog()
        self.turn = -1

    def decode_execute(self, result: str, has_tool_call_tag: bool) -> list[str]:
        return qwen_handler().decode_execute(result, has_tool_call_tag)

    def _pre_query_processing_FC(self, inference_data: dict, test_entry: dict) -> dict:
        inference_data["message"] = []
        return inference_data

    def _compile_tools(self, inference_data: dict, test_entry: dict) -> dict:
        inference_data["tools"] = convert_to_tool(test_entry["function"], GORILLA_TO_OPENAPI, self.model_style)
        return inference_data

    def add_first_turn_message_FC(self, inference_data: dict, first_turn_message: list[dict]) -> dict:
        return self._add_next_turn_user_message_FC(inference_data, first_turn_message)

    def _add_next_turn_user_message_FC(self, inference_data: dict, user_message: list[dict]) -> dict:
        self.turn += 1
        inference_data["message"].extend(user_message)
        return inference_data

    def _query_FC(self, inference_data: dict) -> tuple[str, float]:
        messages, tools = inference_data["message"], inference_data["tools"]
        self.requests.add(messages, tools)
        return self.policy.act(copy.deepcopy(messages), copy.deepcopy(tools), self.turn), 0.0

    def _parse_query_response_FC(self, api_response: str) -> dict:
        return {"model_responses": model_response(api_response), "raw": api_response,
                "input_token": 0, "output_token": 0}

    def _add_assistant_message_FC(self, inference_data: dict, model_response_data: dict) -> dict:
        inference_data["message"].append({"role": "assistant", "content": model_response_data["raw"]})
        return inference_data

    def _add_execution_results_FC(self, inference_data: dict, execution_results: list[str],
                                  model_response_data: dict) -> dict:
        inference_data["message"].extend({"role": "tool", "content": r} for r in execution_results)
        return inference_data


@dataclass(frozen=True)
class PipelineResult:
    valid: bool  # BFCL's verdict on the entry
    requests_sha256: str  # the fingerprint of every request the loop sent (``seal_envs.evaluation.fingerprint``)
    responses: list[list[str]]  # per played turn, per step, the raw completion


def bfcl_pipeline(task: Task, policy: Policy) -> PipelineResult:
    """Run ``task`` through BFCL's inference loop and evaluation with ``policy`` as the model."""
    model_name = f"seal_ref_{uuid.uuid4().hex}"
    handler = ScriptedHandler(policy, model_name)
    policy.start(task)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the loop prints every step
            responses, _ = handler.inference_multi_turn_FC(test_entry(task), include_input_log=False,
                                                           exclude_state_log=True)
    finally:
        forget_instances(handler.model_name_underline_replaced)
    decoded = [[bfcl_calls(text) for text in turn] for turn in responses]
    return PipelineResult(bool(official_verdict(task, decoded)["valid"]), handler.requests.hexdigest(), responses)
