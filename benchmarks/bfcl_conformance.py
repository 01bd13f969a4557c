"""BFCL conformance table: every perturbation family on all 800 tasks, eval mode against BFCL itself.

    python benchmarks/bfcl_conformance.py [--every N]

Per family: trajectories, how many fail, agreement of the env's reward with BFCL's official checker on the
calls the env decoded, agreement with BFCL's whole pipeline (its multi-turn inference loop with the same
scripted model, then its evaluation), and how many trajectories sent the model exactly the same requests
(request-by-request hash). Prints a Markdown table (the one in ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import sys
import time

from seal_envs.bfcl import make_env
from seal_envs.bfcl.conformance import FAMILIES, ScriptPolicy, judge
from seal_envs.bfcl.reference import bfcl_pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=1, help="every N-th task only (default: all 800)")
    args = parser.parse_args(argv)
    env = make_env(split="all", mode="eval", sandbox="inprocess")
    tasks = env.unwrapped.tasks[:: args.every]
    print("| family | trajectories | failing | = official checker | = BFCL pipeline | same requests |")
    print("|---|---|---|---|---|---|")
    totals = [0, 0, 0, 0, 0]
    env_s = pipeline_s = 0.0
    for family in FAMILIES:
        row = [0, 0, 0, 0, 0]
        for task in tasks:
            start = time.perf_counter()
            judgement = judge(env, task, family)
            env_s += time.perf_counter() - start
            if judgement is None:
                continue
            start = time.perf_counter()
            theirs = bfcl_pipeline(task, ScriptPolicy(lambda _task: judgement.script))
            pipeline_s += time.perf_counter() - start
            ours = judgement.record
            for i, value in enumerate((1, not ours.passed, judgement.agrees, ours.passed == theirs.valid,
                                       ours.requests_sha256 == theirs.requests_sha256)):
                row[i] += value
        totals = [t + r for t, r in zip(totals, row)]
        print(f"| {family} | {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]} |", flush=True)
    print(f"| **all {len(FAMILIES)} families** | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} | "
          f"{totals[4]} |")
    print(f"\n{len(tasks)} tasks; env + official checker {env_s:.1f} s, BFCL pipeline {pipeline_s:.1f} s")
    env.close()
    return 0 if totals[0] == totals[2] == totals[3] == totals[4] else 1


if __name__ == "__main__":
    sys.exit(main())
