"""OpenMP threads that spin at barriers against threads that sleep there, on a machine shared by busy processes.

    python benchmarks/omp_wait.py [--rounds 5]

SEAL's CPU runs put several torch processes on a few cores (rollout server, actor, agent loops, tools). Each
round times a decode-sized matrix product (16 x 576 by 576 x 1536, SmolLM2-135M's MLP shape at batch 16) and a
prefill-sized one (256 rows) in a fresh process with ``OMP_WAIT_POLICY`` unset (libgomp's default: spin, then
sleep) and with ``PASSIVE`` (sleep at once), alternating, alone on the machine and beside one busy process (a
torch loop with the default policy, as any other job). It prints the medians and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBE = r"""
import json, time, torch
torch.set_num_threads({threads})
w = torch.randn(1536, 576)
out = {{}}
for rows in (16, 256):
    x = torch.randn(rows, 576)
    for _ in range(5):
        torch.nn.functional.linear(x, w)
    t = time.perf_counter()
    for _ in range(200):
        torch.nn.functional.linear(x, w)
    out[rows] = (time.perf_counter() - t) / 200 * 1e3
print(json.dumps(out))
"""

BUSY = r"""
import torch
torch.set_num_threads({threads})
a = torch.randn(512, 512)
while True:
    for _ in range(50):
        a = torch.tanh(a @ a)
"""


def probe(policy: str | None, threads: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", PROBE.format(threads=threads)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    for setting in ("alone", "beside a busy process"):
        busy = None
        if setting != "alone":
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            busy = subprocess.Popen([sys.executable, "-c", BUSY.format(threads=args.threads)], env=env)
            time.sleep(3)
        try:
            for _ in range(args.rounds):
                for policy in (None, "PASSIVE"):
                    for rows, ms in probe(policy, args.threads).items():
                        results.setdefault(f"{setting}, {policy or 'default'}", {}).setdefault(rows, []).append(ms)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    print(f"{args.threads} threads, {args.rounds} rounds, median ms per product")
    print(f"{'':36s} {'16 rows':>10s} {'256 rows':>10s}")
    for name, by_rows in results.items():
        print(f"{name:36s} " + " ".join(f"{statistics.median(v):10.3f}" for v in by_rows.values()))
    for setting in ("alone", "beside a busy process"):
        default, passive = results[f"{setting}, default"], results[f"{setting}, PASSIVE"]
        ratios = [statistics.median(default[r]) / statistics.median(passive[r]) for r in default]
        print(f"{setting}: default / passive = " + ", ".join(f"{x:.2f}x" for x in ratios) + " (16, 256 rows)")


if __name__ == "__main__":
    main()
