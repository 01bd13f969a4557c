"""What a new user sees from the command lines: ``seal-envs list``, label colours by meaning, and a
``seal-train`` console that shows it is alive during long rollouts."""

from __future__ import annotations

import stat

from seal_envs.cli import main as envs_main
from seal_envs.evaluation.report import FAULT_COLOURS, SUCCESS_COLOURS, label_colours


def test_seal_envs_list_shows_envs_domains_splits_and_counts(capsys):
    assert envs_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "seal/Shop-v0" in out and "seal/BFCL-v3-MultiTurn-v0" in out and "seal/ToolUse-v0" in out
    assert "shop: 13 tools; tasks.json: 36 tasks; split 'train'" in out
    assert "bfcl: " in out and "split 'train': 400 tasks; split 'eval': 400 tasks" in out


def test_labels_are_coloured_by_meaning_in_groups():
    colours = label_colours(["task_error", "missing_tool_call", "pass", "argument_mismatch", "correct_abstention",
                             "infrastructure_error"])
    assert list(colours)[:2] == ["pass", "correct_abstention"] and list(colours)[-2:] == ["infrastructure_error",
                                                                                         "task_error"]
    assert {colours["pass"], colours["correct_abstention"]} <= set(SUCCESS_COLOURS)
    assert {colours["task_error"], colours["infrastructure_error"]} <= set(FAULT_COLOURS)
    failures = {colours["missing_tool_call"], colours["argument_mismatch"]}
    assert len(failures) == 2 and not failures & (set(SUCCESS_COLOURS) | set(FAULT_COLOURS))


def test_seal_train_console_says_a_silent_run_is_alive(tmp_path, capsys, monkeypatch):
    from seal_trainer import cli

    child = tmp_path / "child"
    child.write_text("#!/bin/sh\necho '[seal] step 1'\necho 'verl noise'\nsleep 2.5\necho '[seal] done'\n")
    child.chmod(child.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(cli.sys, "executable", str(child))
    monkeypatch.setattr(cli, "HEARTBEAT_S", 1.0)
    assert cli.run_child(tmp_path / "config.yaml", tmp_path / "train.log", verbose=False) == 0
    out = capsys.readouterr().out
    assert out.startswith("[seal] step 1") and "[seal] still running: " in out and out.endswith("[seal] done\n")
    assert "verl noise" not in out and "verl noise" in (tmp_path / "train.log").read_text()


def test_seal_train_console_says_why_ray_kills_its_workers(tmp_path, capsys, monkeypatch):
    from seal_trainer import cli

    oom = ("\x1b[33m(raylet)\x1b[0m [2026-12-06 13:07:32,425 E 14022 14022] (raylet) node_manager.cc:3517: 5 Workers "
           "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
           "(ID: e73f36, IP: 192.0.2.2) over the last time period.")
    child = tmp_path / "child"
    child.write_text(f"#!/bin/sh\necho '[seal] step 1'\necho '{oom}'\necho '{oom}'\nsleep 3.5\n")  # heartbeat every 1 s: margin on a loaded machine
    child.chmod(child.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(cli.sys, "executable", str(child))
    monkeypatch.setattr(cli, "HEARTBEAT_S", 1.0)
    assert cli.run_child(tmp_path / "config.yaml", tmp_path / "train.log", verbose=False) == 0
    out = capsys.readouterr().out
    assert out.count("[seal] Ray's memory monitor killed 5 worker(s) of this run on node 192.0.2.2") == 1
    assert "Ray killed 10 worker(s) for lack of memory" in out  # the heartbeat keeps the count
