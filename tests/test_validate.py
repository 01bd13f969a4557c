"""``seal-envs validate`` and make-time resolution: each kind of broken ground truth that used to replay to a
reward of 1.0 (or surface only at the first reset) is reported with file, task id and turn."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest

from seal_envs.cli import main
from seal_envs.env import ToolUseEnv
from seal_envs.resolve import UnresolvedImplementations
from seal_envs.sandbox.pool import close_all_pools
from seal_envs.validation import ValidationConfig, validate_domain

FAST = ValidationConfig(sandbox="inprocess")  # trusted test domains; one test below runs in Docker

from conftest import LEDGER

TOOLS = json.loads((LEDGER / "tools.json").read_text())
DEPOSIT = {"name": "deposit", "arguments": {"account": "alice", "amount": 5}}


def write_domain(root: Path, ground_truth=(DEPOSIT,), required=(), domain="ledger", implementation=None) -> Path:
    """A copy of the ledger domain with one task (one turn) and, optionally, deposit's implementation replaced."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(LEDGER / "ledger_api.py", root / "ledger_api.py")
    tools = json.loads(json.dumps(TOOLS))
    if implementation:
        tools["tools"][1]["implementation"] = implementation
    (root / "tools.json").write_text(json.dumps(tools))
    task = {"id": "t1", "initial_state": {"ledger_api:LedgerAPI": {"balances": {"alice": 10}}},
            "turns": [{"user": "Go.", "ground_truth": list(ground_truth), "required_response": list(required)}]}
    (root / "tasks.json").write_text(json.dumps({"domain": domain, "tasks": [task]}))
    return root


FAULTS = {
    "raising call": ({"ground_truth": [{"name": "get_balance", "arguments": {"account": "nobody"}}]},
                     "tasks.json: task 't1', turn 0, at $.tasks[0].turns[0].ground_truth[0]: ground-truth call "
                     "get_balance({\"account\": \"nobody\"}) raises KeyError"),
    "enum violation": ({"ground_truth": [{"name": "set_mode", "arguments": {"mode": "turbo"}}]},
                       "task 't1', turn 0, at $.tasks[0].turns[0].ground_truth[0]: ground-truth call "
                       "set_mode({\"mode\": \"turbo\"}) passes 'mode' outside the tool's enum ['safe', 'fast']"),
    "missing required argument": ({"ground_truth": [{"name": "deposit", "arguments": {"account": "alice"}}]},
                                  "task 't1', turn 0, at $.tasks[0].turns[0].ground_truth[0]: ground-truth call "
                                  "deposit({\"account\": \"alice\"}) misses the required argument 'amount'"),
    "wrong type": ({"ground_truth": [{"name": "deposit", "arguments": {"account": "alice", "amount": "5"}}]},
                   "passes 'amount' of the wrong type (the tool wants 'integer')"),
    "unknown tool": ({"ground_truth": [{"name": "withdraw", "arguments": {}}]},
                     "ground-truth call withdraw({}) names no tool of domain 'ledger'"),
    "unsatisfiable required response": ({"required": ["999"]},
                                        "task 't1', turn 0, at $.tasks[0].turns[0].required_response: required "
                                        "response '999' is in no ground-truth output"),
    "domain mismatch": ({"domain": "bank"}, "tasks.json: 1 task(s) belong to domain 'bank', but "),
    "method typo": ({"implementation": "ledger_api:LedgerAPI.depsit"},
                    "tools.json: at $.tools[1].implementation: 'ledger_api:LedgerAPI.depsit': class 'LedgerAPI' "
                    "has no method 'depsit' (did you mean 'deposit'?)"),
    "missing class": ({"implementation": "ledger_api:Ledger.deposit"},
                      "'ledger_api:Ledger.deposit': module 'ledger_api' has no class 'Ledger' (did you mean "
                      "'LedgerAPI'?)"),
    "missing module": ({"implementation": "no_such_module:LedgerAPI.deposit"},
                       "'no_such_module:LedgerAPI.deposit': cannot import module 'no_such_module': "
                       "ModuleNotFoundError"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_reported_with_file_task_and_turn(tmp_path, capsys, fault):
    edits, expected = FAULTS[fault]
    root = write_domain(tmp_path / "domain", **edits)
    report = validate_domain(root, FAST)
    assert not report.ok and any(expected in str(p) for p in report.problems), [str(p) for p in report.problems]
    assert main(["validate", str(root), "--sandbox", "inprocess"]) == 1
    out = capsys.readouterr().out
    assert expected in out and out.splitlines()[-1].endswith(f"{len(report.problems)} problem(s)")


def test_a_faulty_implementation_is_reported_once(tmp_path):
    """The replay's failures that follow from an unresolved implementation are not new problems."""
    report = validate_domain(write_domain(tmp_path / "d", implementation="ledger_api:LedgerAPI.depsit"), FAST)
    assert [p.json_path for p in report.problems] == ["$.tools[1].implementation"]


def test_unloadable_initial_state_class_names_the_task(tmp_path):
    root = write_domain(tmp_path / "d")
    doc = json.loads((root / "tasks.json").read_text())
    doc["tasks"][0]["initial_state"] = {"ledger_api:NoSuchClass": {}}
    (root / "tasks.json").write_text(json.dumps(doc))
    assert [str(p).split(": ", 1)[1] for p in validate_domain(root, FAST).problems] == [
        "task 't1', at $.tasks[0].initial_state: initial state class 'ledger_api:NoSuchClass': module 'ledger_api' "
        "has no class 'NoSuchClass'"]


def test_valid_domains_print_a_short_ok(capsys):
    assert main(["validate", "shop", "--sandbox", "inprocess"]) == 0
    assert re.fullmatch(r"shop: 36 tasks, 102 ground-truth calls replayed \(inprocess sandbox, [0-9.]+ s\): OK",
                        capsys.readouterr().out.strip())
    assert validate_domain("shop", ValidationConfig(sandbox="inprocess", split="eval")).ok
    assert validate_domain(LEDGER, FAST).ok


def test_a_domain_without_tasks_json_asks_for_a_split(capsys):
    assert main(["validate", "bfcl", "--sandbox", "inprocess"]) == 1
    assert "pass a split" in capsys.readouterr().err


@pytest.mark.parametrize("fault", ["method typo", "missing class", "missing module"])
def test_make_refuses_unresolvable_implementations_with_validates_message(tmp_path, fault):
    edits, _ = FAULTS[fault]
    root = write_domain(tmp_path / "domain", **edits)
    [problem] = validate_domain(root, FAST).problems
    with pytest.raises(UnresolvedImplementations) as caught:
        gym.make("seal/ToolUse-v0", domain=str(root), sandbox="inprocess")
    assert str(problem) in str(caught.value).splitlines()


def test_make_refuses_tasks_of_another_domain(tmp_path):
    root = write_domain(tmp_path / "domain", domain="bank")
    with pytest.raises(ValueError, match="tasks of domain 'bank' given to an env of domain 'ledger'"):
        gym.make("seal/ToolUse-v0", domain=str(root), sandbox="inprocess")


@pytest.mark.docker
def test_docker_resolves_and_replays_inside_the_sandbox(docker_daemon):
    """The domain's code is imported in the container (the host never imports it), for make and validate."""
    with tempfile.TemporaryDirectory(prefix="seal-validate-") as folder:
        os.chmod(folder, 0o755)  # the sandbox user (nobody) reads the mounted domain
        root = write_domain(Path(folder) / "typo", implementation="ledger_api:LedgerAPI.depsit")
        bad = write_domain(Path(folder) / "raises", [{"name": "get_balance", "arguments": {"account": "nobody"}}])
        for path in (root, bad, *root.iterdir(), *bad.iterdir()):
            os.chmod(path, 0o755)
        try:
            with pytest.raises(UnresolvedImplementations, match="has no method 'depsit'"):
                ToolUseEnv(domain=root, sandbox="docker")
            report = validate_domain(bad, ValidationConfig(sandbox="docker"))
        finally:  # containers bind the folder's tool modules: none may start while it is deleted
            close_all_pools()
        assert [p.message.split(":")[0] for p in report.problems] == [
            'ground-truth call get_balance({"account"'] and "raises KeyError" in str(report.problems[0])


def test_gym_make_warns_loudly_about_ground_truth_that_breaks_a_schema(tmp_path):
    """`validate` is not the only place that notices: the env checks its tasks' ground truth once when made."""
    import warnings

    from seal_envs.env import ToolUseEnv
    from seal_envs.ground_truth import GroundTruthWarning

    root = write_domain(tmp_path / "d", ground_truth=[{"name": "deposit", "arguments": {"account": "alice",
                                                                                        "amount": "5"}}])
    with pytest.warns(GroundTruthWarning, match=r"task 't1', turn 0, at \$\.tasks\[0\]\.turns\[0\]\.ground_truth\[0\]"
                                                r".*'amount' of the wrong type \(the tool wants 'integer'\)"):
        ToolUseEnv(domain=root, sandbox="inprocess").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", GroundTruthWarning)
        ToolUseEnv(domain=write_domain(tmp_path / "good"), sandbox="inprocess").close()  # a clean domain: silent
