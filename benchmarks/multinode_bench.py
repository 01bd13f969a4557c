"""Environment-only throughput on 1, 2 and 3 simulated Ray nodes, side by side in one run.

    PYTHONPATH=. python benchmarks/multinode_bench.py [--seconds 20] [--envs-per-node 4] [--out FILE]

One ``SimulatedCluster(3)`` (``tests/simulated_cluster.py``: a raylet and a Docker daemon per node, one machine).
For k = 1, 2, 3 a Ray actor on each of the first k nodes plays ``seal/Shop-v0`` training episodes with the
ground-truth replay policy (no model: the environment's share of a step alone), ``--envs-per-node`` episodes at a
time, each env with its Docker sandbox on that node's daemon, for ``--seconds``. Per k: episodes/s, env-step
latency (median, p95), episodes not scoring 1 (must be 0), and per node its actor's resident memory and the
memory of its running sandboxes. All nodes share this machine's cores: the figures price running the envs on
several nodes (Ray dispatch, a daemon per node), not the speed-up of more machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from simulated_cluster import SimulatedCluster  # noqa: E402


class EpisodeRunner:
    """``envs`` Shop training envs in one process (a node's share of the agent loop), replaying ground truth."""

    def __init__(self, envs: int):
        import gymnasium as gym

        import seal_envs  # noqa: F401  (registers the env ids)

        self.envs = [gym.make("seal/Shop-v0", mode="train", sandbox="docker") for _ in range(envs)]

    def play(self, seconds: float, warm_up: bool = False) -> dict:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        from seal_envs.evaluation.policies import ReplayPolicy
        from seal_envs.evaluation.runner import run_episode

        steps: list[float] = []
        rewards: list[float] = []
        lock = threading.Lock()
        stop = time.perf_counter() + seconds

        def drive(i: int) -> None:
            env = self.envs[i]
            original_step, tasks = env.step, env.unwrapped.tasks
            times: list[float] = []

            def timed_step(action):
                start = time.perf_counter()
                try:
                    return original_step(action)
                finally:
                    times.append(time.perf_counter() - start)

            env.step = timed_step
            n = i
            while True:
                record = run_episode(env, ReplayPolicy(), tasks[n % len(tasks)])
                n += len(self.envs)
                with lock:
                    rewards.append(record.reward)
                if warm_up or time.perf_counter() > stop:
                    break
            env.step = original_step
            with lock:
                steps.extend(times)

        with ThreadPoolExecutor(len(self.envs)) as pool:
            list(pool.map(drive, range(len(self.envs))))
        return {"episodes": len(rewards), "failed": sum(r != 1.0 for r in rewards), "steps": steps}

    def memory_mib(self) -> dict:
        import docker
        import psutil

        client = docker.from_env()
        sandboxes = []
        for c in client.api.containers(filters={"label": ["seal.sandbox=1"]}):
            stats = client.api.stats(c["Id"], stream=False, one_shot=True)["memory_stats"]
            cache = (stats.get("stats") or {}).get("inactive_file", 0)
            sandboxes.append((stats.get("usage", 0) - cache) / 2**20)
        return {"actor_rss": psutil.Process().memory_info().rss / 2**20, "sandboxes": len(sandboxes),
                "sandbox_mib": sum(sandboxes)}


def dockerd_rss_mib(docker_dir: str) -> float:
    import psutil

    return psutil.Process(int((Path(docker_dir) / "dockerd.pid").read_text())).memory_info().rss / 2**20


def measure(runners: list, seconds: float) -> dict:
    started = time.perf_counter()
    results = ray.get([r.play.remote(seconds) for r in runners])
    elapsed = time.perf_counter() - started
    steps = sorted(s for r in results for s in r["steps"])
    episodes = sum(r["episodes"] for r in results)
    return {"nodes": len(runners), "episodes": episodes, "elapsed_s": round(elapsed, 2),
            "episodes_per_s": round(episodes / elapsed, 2), "failed": sum(r["failed"] for r in results),
            "step_ms_median": round(1e3 * statistics.median(steps), 2),
            "step_ms_p95": round(1e3 * steps[int(0.95 * (len(steps) - 1))], 2), "env_steps": len(steps),
            "per_node": ray.get([r.memory_mib.remote() for r in runners])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--envs-per-node", type=int, default=4)
    parser.add_argument("--rounds", type=int, choices=(1, 2), default=2, help="2: k = 1, 2, 3, 3, 2, 1")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "multinode.json")
    args = parser.parse_args()
    rows = []
    with SimulatedCluster(3, head_cpus=2, head_gpus=0) as cluster:
        ray.init(address=cluster.address, logging_level="ERROR")
        actor = ray.remote(num_cpus=1)(EpisodeRunner)
        runners = [actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
                   .remote(args.envs_per_node) for node in cluster.nodes]
        ray.get([r.play.remote(0, warm_up=True) for r in runners])  # every env has built its sandbox
        for k in [1, 2, 3, 3, 2, 1][: 3 * args.rounds]:  # alternating: a drift of the shared machine hits all k
            row = measure(runners[:k], args.seconds)
            row["dockerd_rss_mib"] = [round(dockerd_rss_mib(node.docker_dir), 1) for node in cluster.nodes[:k]]
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "seconds": args.seconds,
                                    "envs_per_node": args.envs_per_node, "rows": rows}, indent=2))
    print(f"{'nodes':>5} {'episodes/s':>10} {'step p50 ms':>11} {'step p95 ms':>11} {'failed':>6}  per node: actor, "
          "sandboxes, dockerd (MiB)")
    for r in rows:
        node = r["per_node"][0]
        print(f"{r['nodes']:>5} {r['episodes_per_s']:>10} {r['step_ms_median']:>11} {r['step_ms_p95']:>11} "
              f"{r['failed']:>6}  {node['actor_rss']:.0f}, {node['sandbox_mib']:.0f} ({node['sandboxes']}), "
              f"{r['dockerd_rss_mib'][0]:.0f}")


if __name__ == "__main__":
    main()
