"""Call and reset latency of two checkouts' Docker sandboxes, alternating in rounds so both see the same load.

    DOCKER_HOST=unix:///tmp/seal-docker/docker.sock python benchmarks/sandbox_rounds.py BEFORE AFTER [--rounds 2]

Each round and checkout runs in a fresh process with that checkout on PYTHONPATH: a ``DockerSandbox``, 500
calls of ``evil_tools:EvilTools.add`` and the same on the in-process backend (medians and their ratio), 30
resets (median). On a shared machine this is the fair comparison: load drifts between two long runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

EVIL = str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "evil")
MEASURE = f"""
import statistics, time
import seal_envs
from seal_envs.sandbox import SandboxConfig
from seal_envs.sandbox.docker import DockerSandbox
from seal_envs.sandbox.inprocess import InProcessSandbox
classes = {{"evil_tools:EvilTools": {{"counter": 0}}}}
def calls(box, n):
    box.reset(classes, [{EVIL!r}])
    out = []
    for _ in range(n):
        start = time.perf_counter()
        box.call("evil_tools:EvilTools.add", {{"amount": 1}})
        out.append(time.perf_counter() - start)
    return statistics.median(out) * 1e3
docker, local = DockerSandbox(SandboxConfig()), InProcessSandbox(SandboxConfig(backend="inprocess"))
calls(docker, 50)
docker_ms, local_ms = calls(docker, 500), calls(local, 500)
resets = []
for _ in range(30):
    start = time.perf_counter()
    docker.reset(classes, [{EVIL!r}])
    resets.append(time.perf_counter() - start)
docker.close()
print(f"call median docker {{docker_ms:.3f}} ms, in-process {{local_ms:.4f}} ms, ratio {{docker_ms / local_ms:.1f}}x; "
      f"reset median {{statistics.median(resets) * 1e3:.2f}} ms", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("checkouts", nargs=2, help="two checkouts (the library of each is measured)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for round_ in range(1, args.rounds + 1):
        for checkout in args.checkouts:
            print(f"round {round_} {checkout}: ", end="", flush=True)
            subprocess.run([sys.executable, "-c", MEASURE], check=True,
                           env={**os.environ, "PYTHONPATH": os.path.abspath(checkout)})


if __name__ == "__main__":
    main()
