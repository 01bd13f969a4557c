"""Mutation testing of SEAL's method modules with mutmut: does breaking one line make a fast test fail?

    python benchmarks/mutation.py                       # every module below, one after another
    python benchmarks/mutation.py verifier envpool      # some of them (names as in MODULES)
    python benchmarks/mutation.py --list                # the modules and the tests each is run against
    python benchmarks/mutation.py --survivors trainer   # a finished run's surviving mutants, as diffs
    python benchmarks/mutation.py --table               # the recorded scores as the table of docs/testing.md

On demand, never in CI (minutes per module on 2 cores). Each module runs in its own copy of the repository under
``--work-dir`` (default ``/tmp/seal-mutation/<module>``) with a ``[tool.mutmut]`` section that mutates only that
module and runs only its fast unit test files; mutmut maps each mutated function to the tests that call it, so a
mutant costs only those tests. Docker-backed test parameters are left out (``SEAL_TEST_BACKENDS=inprocess``): the
method's logic is the same under both backends. A run of the same module after a change starts from scratch.

Prints one line per module (killed / survived / timeout / no tests / score) and writes them, with the date and
the command, to ``<work-dir>/scores.json``; ``docs/testing.md`` reports the latest scores and why the survivors
were left. Install the tool with ``pip install -e ".[mutation]"`` (mutmut 3.8.1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# module -> the fast unit test files that exercise it (seconds each; no Docker, no verl training run)
MODULES: dict[str, tuple[str, list[str]]] = {
    "verifier": ("seal_envs/verifier.py", ["tests/test_verifier.py", "tests/test_env.py", "tests/test_shop_env.py",
                                           "tests/test_bfcl_protocol.py"]),
    "envpool": ("seal_trainer/envpool.py", ["tests/test_envpool.py", "tests/test_closed_loop.py",
                                            "tests/test_agent_loop.py"]),
    "trainer": ("seal_trainer/trainer.py", ["tests/test_trainer_step.py"]),
    "diagnosis": ("seal_envs/diagnosis.py", ["tests/test_diagnosis.py", "tests/test_env.py", "tests/test_interface.py",
                                             "tests/test_bfcl_protocol.py"]),
    "interface": ("seal_envs/interface.py", ["tests/test_interface.py", "tests/test_closed_loop.py",
                                             "tests/test_env.py"]),
    "advantage": ("seal_trainer/advantage.py", ["tests/test_trainer_advantage.py", "tests/test_trainer_step.py"]),
    "closed_loop": ("seal_trainer/closed_loop.py", ["tests/test_closed_loop.py", "tests/test_trainer_step.py"]),
}
COPIED = ["seal_envs", "seal_trainer", "tool_specs", "tests", "_seal_gym_hook.py", "pyproject.toml"]


def prepare(name: str, work: Path) -> None:
    """A fresh copy of the sources and tests, configured to mutate one module."""
    module, tests = MODULES[name]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for item in COPIED:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, work / item, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, work / item)
    section = "\n".join([
        "", "[tool.mutmut]",
        'source_paths = ["seal_envs", "seal_trainer", "tool_specs"]',
        f"only_mutate = [{json.dumps(module)}]",
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-W", "ignore::UserWarning", "-W", "ignore::DeprecationWarning"]',
        # each mutant forks from a server that only collected the tests: process-wide caches (ground-truth
        # replays, env pools) start empty, as in a fresh test run
        'process_isolation = "forkserver"',
        "",
    ])
    with open(work / "pyproject.toml", "a") as f:
        f.write(section)


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts its mutants/ first
    env.update(SEAL_TEST_BACKENDS="inprocess", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    return env


def results(work: Path) -> dict[str, int]:
    """Counts per mutmut status, from ``mutmut results --all true``."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work, env=environment(),
                         capture_output=True, text=True, check=True).stdout
    counts: dict[str, int] = {}
    for line in out.splitlines():
        if ":" in line and "__mutmut_" in line:
            status = line.rsplit(":", 1)[1].strip()
            counts[status] = counts.get(status, 0) + 1
    return counts


def score(counts: dict[str, int]) -> float | None:
    """Killed (by a failing test or a timeout) over the mutants some test ran against."""
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    tested = killed + counts.get("survived", 0) + counts.get("suspicious", 0)
    return round(100.0 * killed / tested, 1) if tested else None


def run(name: str, work: Path, children: int) -> dict:
    prepare(name, work)
    t0 = time.time()
    code = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(children)], cwd=work,
                          env=environment()).returncode
    counts = results(work)
    return {"module": MODULES[name][0], "tests": MODULES[name][1], "counts": counts, "score": score(counts),
            "minutes": round((time.time() - t0) / 60, 1), "exit": code}


def survivors(work: Path) -> None:
    names = [line.split(":")[0].strip() for line in subprocess.run(
        [sys.executable, "-m", "mutmut", "results"], cwd=work, env=environment(), capture_output=True, text=True,
        check=True).stdout.splitlines() if line.strip().endswith("survived")]
    for mutant in names:
        print(subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], cwd=work, env=environment(),
                             capture_output=True, text=True).stdout)


def table(record: dict) -> str:
    """Markdown rows: module, tests, killed, survived, not reached by the tests, score, minutes, date."""
    rows = ["| module | tests | killed | survived | no test reaches | score | minutes | date |",
            "|---|---|---|---|---|---|---|---|"]
    for name in MODULES:
        if name in record:
            r, c = record[name], record[name]["counts"]
            tests = ", ".join(Path(t).name for t in r["tests"])
            rows.append(f"| `{r['module']}` | {tests} | {c.get('killed', 0) + c.get('timeout', 0)} | "
                        f"{c.get('survived', 0)} | {c.get('no tests', 0)} | {r['score']}% | {r['minutes']} | "
                        f"{r['date']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"some of {', '.join(MODULES)} (default: all, in this order)")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/seal-mutation"))
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2 cores)")
    parser.add_argument("--list", action="store_true", help="print the modules and their tests")
    parser.add_argument("--survivors", action="store_true", help="print the surviving mutants of a finished run")
    parser.add_argument("--table", action="store_true", help="print the recorded scores as a Markdown table")
    args = parser.parse_args(argv)
    names = args.modules or list(MODULES)
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {', '.join(MODULES)}")
    if args.list:
        for name in names:
            print(f"{name:12} {MODULES[name][0]:30} {' '.join(MODULES[name][1])}")
        return 0
    if args.survivors:
        for name in names:
            print(f"=== {name}")
            survivors(args.work_dir / name)
        return 0
    record_path = args.work_dir / "scores.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    if args.table:
        print(table(record))
        return 0
    for name in names:
        result = run(name, args.work_dir / name, args.max_children)
        result.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      command=f"python benchmarks/mutation.py {name}")
        record[name] = result
        record_path.write_text(json.dumps(record, indent=1))
        print(f"[mutation] {name}: {result['counts']} score {result['score']}% in {result['minutes']} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
