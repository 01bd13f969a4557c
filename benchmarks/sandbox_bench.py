"""Sandbox latency and throughput, Docker next to the in-process backend.

    DOCKER_HOST=unix:///tmp/seal-docker/docker.sock python benchmarks/sandbox_bench.py [--calls 2000]

Prints container start, warm-pool reset, call round trip (median/p99), calls/s with N concurrent
sandboxes driven from threads, env steps/s on the ledger test domain, memory per sandbox, and N concurrent
ground-truth episodes (``--episodes-concurrency``): exceptions, episodes not scoring 1.0, step latency.
To compare with another checkout in the same run (same daemon, same load), pass ``--before PATH``: the
figures are measured first with PATH's library, then with this one's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from pathlib import Path

from seal_envs.sandbox import Sandbox, SandboxConfig, SandboxPool
from seal_envs.sandbox.docker import DockerSandbox, docker_client
from seal_envs.sandbox.inprocess import InProcessSandbox

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT / "tests" / "fixtures" / "evil")]
LEDGER = ROOT / "tests" / "fixtures" / "ledger"
CLASSES = {"evil_tools:EvilTools": {"counter": 0}}
TARGET = "evil_tools:EvilTools.add"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f} ms"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def start_latency(factory: Callable[[], Sandbox], repeat: int) -> float:
    boxes: list[Sandbox] = []
    timings = timed(lambda: boxes.append(factory()), repeat)
    for box in boxes:
        box.close()
    return statistics.median(timings)


def warm_reset(pool: SandboxPool, repeat: int) -> tuple[float, float]:
    """Median of acquire+reset+release from a warm pool, and of reset alone on a held sandbox."""
    def cycle() -> None:
        box = pool.acquire()
        box.reset(CLASSES, PATHS)
        pool.release(box)
    cycle()
    cycles = timed(cycle, repeat)
    box = pool.acquire()
    resets = timed(lambda: box.reset(CLASSES, PATHS), repeat)
    pool.release(box)
    return statistics.median(cycles), statistics.median(resets)


def round_trip(box: Sandbox, calls: int) -> list[float]:
    box.reset(CLASSES, PATHS)
    return timed(lambda: box.call(TARGET, {"amount": 1}), calls)


def throughput(boxes: list[Sandbox], seconds: float) -> tuple[float, int]:
    """Calls/s over all sandboxes, one thread each; and how many calls failed."""
    for box in boxes:
        box.reset(CLASSES, PATHS)
    counts, failures = [0] * len(boxes), [0] * len(boxes)
    barrier = threading.Barrier(len(boxes) + 1)
    stop = float("inf")  # set once every thread is ready

    def drive(i: int) -> None:
        barrier.wait()
        while time.perf_counter() < stop:
            if not boxes[i].call(TARGET, {"amount": 1}).ok:
                failures[i] += 1
            counts[i] += 1

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(len(boxes))]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    stop = started + seconds
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started), sum(failures)


def ground_truth_episode(env, task, step_times: list[float] | None = None) -> tuple[float | None, str]:
    """Play ``task``'s ground truth in ``env``; returns the reward (None when the episode was masked as an
    infrastructure error) and the last label with its reason, timing each step into ``step_times``."""
    from seal_envs.parsing import format_tool_call

    env.reset(options={"task_id": task.id})
    actions = [a for t in task.turns
               for a in [format_tool_call(c) for c in t.ground_truth] + [" ".join(t.required_response) or "Done."]]
    for action in actions:
        start = time.perf_counter()
        _, reward, terminated, _, info = env.step(action)
        if step_times is not None:
            step_times.append(time.perf_counter() - start)
        if terminated:
            why = f"{info.get('label')}: {(info.get('diagnosis') or {}).get('reason', '')}"
            return (None if info.get("infrastructure_error") else float(reward)), why
    raise RuntimeError(f"task {task.id!r}: the ground truth did not end the episode")


def env_steps(backend: str, episodes: int) -> float:
    """Steps/s of ToolUseEnv replaying the ledger tasks' ground truth."""
    from seal_envs.env import ToolUseEnv

    env = ToolUseEnv(domain=LEDGER, sandbox=SandboxConfig(backend=backend))
    steps: list[float] = []
    start = time.perf_counter()
    for i in range(episodes):
        reward, why = ground_truth_episode(env, env.tasks[i % len(env.tasks)], steps)
        if reward != 1.0:
            print(f"   !! ground truth scored {reward}: {why}")
    rate = len(steps) / (time.perf_counter() - start)
    env.close()
    return rate


def concurrent_episodes(threads: int, seconds: float) -> None:
    """``threads`` envs (one Docker sandbox each) replaying ledger ground truth at once for ``seconds``."""
    from seal_envs.env import ToolUseEnv

    config = SandboxConfig(pool_size=4)
    envs = [ToolUseEnv(domain=LEDGER, sandbox=config) for _ in range(threads)]
    failures: list[str] = []
    masked, episodes = [0], [0]
    causes: list[str] = []
    step_times: list[float] = []
    lock = threading.Lock()
    stop = [float("inf")]

    def run(i: int, warm_up: bool) -> None:
        env = envs[i]
        while True:
            task = env.tasks[(i + episodes[0]) % len(env.tasks)]
            times: list[float] = []
            try:
                reward, why = ground_truth_episode(env, task, times)
            except Exception as exc:  # counted: an episode must never raise
                reward, why = 0.0, f"{type(exc).__name__}: {exc}"
                with lock:
                    failures.append(why[:200])
            if warm_up:
                return
            with lock:
                episodes[0] += 1
                step_times.extend(times)
                masked[0] += reward is None
                if reward != 1.0:
                    causes.append(why[:200])
            if time.perf_counter() > stop[0]:
                return

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:  # every env gets its sandbox first
        list(pool.map(lambda i: run(i, True), range(threads)))
    print(f"(warmed {threads} envs with their sandboxes in {time.perf_counter() - start:.1f} s)", flush=True)
    stop[0] = time.perf_counter() + seconds
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: run(i, False), range(threads)))
    for env in envs:
        env.close()
    print(f"{threads} concurrent episodes for {seconds:g} s: {episodes[0]} episodes, {len(failures)} exceptions, "
          f"{masked[0]} masked as infrastructure errors, {len(causes) - masked[0] - len(failures)} other ground-truth episodes not "
          "scoring 1.0; "
          f"step median {1e3 * statistics.median(step_times):.2f} ms, "
          f"p99 {1e3 * percentile(step_times, 0.99):.1f} ms", flush=True)
    for cause in sorted(set(causes))[:5]:
        print("   !!", cause)


def docker_memory(boxes: list[DockerSandbox]) -> float:
    """Mean memory use per container in MiB (cgroup usage minus page cache, as `docker stats` shows it)."""
    api = docker_client().api
    usages = []
    for box in boxes:
        stats = api.stats(box.container_id, stream=False, one_shot=True)["memory_stats"]
        cache = stats.get("stats", {}).get("total_inactive_file", stats.get("stats", {}).get("inactive_file", 0))
        usages.append((stats["usage"] - cache) / 2**20)
    return statistics.mean(usages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each throughput run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--episodes-concurrency", type=int, default=0, help="N concurrent env episodes (0: skip)")
    parser.add_argument("--episodes-seconds", type=float, default=30.0)
    parser.add_argument("--before", help="a checkout whose library is measured first, in the same run")
    args = parser.parse_args()
    if args.before:
        argv = [a for i, a in enumerate(sys.argv[1:]) if a != "--before" and sys.argv[i] != "--before"]
        print(f"== before: the library of {args.before}", flush=True)
        subprocess.run([sys.executable, __file__, *argv], check=True,
                       env={**os.environ, "PYTHONPATH": os.path.abspath(args.before)})
    import seal_envs

    print(f"== measuring the library at {Path(seal_envs.__file__).parent.parent}", flush=True)
    top = max(args.concurrency)
    docker_config = SandboxConfig(pool_size=4)
    local_config = SandboxConfig(backend="inprocess", pool_size=4)
    rows: list[tuple[str, float, float, str]] = []

    def row(name: str, docker_value: float, local_value: float, unit: str) -> None:
        rows.append((name, docker_value, local_value, unit))
        ratio = docker_value / local_value if local_value else float("nan")
        print(f"{name:34s} docker {docker_value:12.3f} {unit:7s} in-process {local_value:12.3f} {unit:7s}"
              f" ratio {ratio:10.3g}", flush=True)

    DockerSandbox(docker_config).close()  # build the image, warm the client
    row("sandbox start (median)", 1e3 * start_latency(lambda: DockerSandbox(docker_config), 10),
        1e3 * start_latency(lambda: InProcessSandbox(local_config), 10), "ms")

    docker_pool = SandboxPool(lambda: DockerSandbox(docker_config), docker_config)
    local_pool = SandboxPool(lambda: InProcessSandbox(local_config), local_config, prestart=False)
    while docker_pool.idle_count < docker_config.pool_size:
        time.sleep(0.05)
    docker_cycle, docker_reset = warm_reset(docker_pool, 100)
    local_cycle, local_reset = warm_reset(local_pool, 100)
    row("warm acquire+reset+release (med)", 1e3 * docker_cycle, 1e3 * local_cycle, "ms")
    row("reset on a held sandbox (median)", 1e3 * docker_reset, 1e3 * local_reset, "ms")

    docker_box, local_box = docker_pool.acquire(), local_pool.acquire()
    docker_rt, local_rt = round_trip(docker_box, args.calls), round_trip(local_box, args.calls)
    row("call round trip median", 1e3 * statistics.median(docker_rt), 1e3 * statistics.median(local_rt), "ms")
    row("call round trip p99", 1e3 * percentile(docker_rt, 0.99), 1e3 * percentile(local_rt, 0.99), "ms")
    docker_pool.release(docker_box)
    local_pool.release(local_box)

    start = time.perf_counter()
    with ThreadPoolExecutor(top) as executor:  # concurrent starts: the daemon is the bottleneck
        docker_boxes = list(executor.map(lambda _: docker_pool.acquire(), range(top)))
    print(f"(started {top} docker sandboxes from {top} threads in {time.perf_counter() - start:.2f} s)", flush=True)
    local_boxes = [InProcessSandbox(local_config) for _ in range(top)]
    for n in args.concurrency:
        docker_rate, docker_failed = throughput(docker_boxes[:n], args.seconds)
        local_rate, _ = throughput(local_boxes[:n], args.seconds)
        row(f"calls/s, {n} concurrent sandboxes", docker_rate, local_rate, "calls/s")
        if docker_failed:
            print(f"   !! {docker_failed} docker calls failed with {n} concurrent sandboxes")
    print(f"memory per docker sandbox (mean of 8)      {docker_memory(docker_boxes[:8]):8.2f} MiB")
    for box in docker_boxes:
        docker_pool.release(box)
    docker_pool.close()
    local_pool.close()

    row("env steps/s (ledger ground truth)", env_steps("docker", 40), env_steps("inprocess", 40), "steps/s")
    if args.episodes_concurrency:
        concurrent_episodes(args.episodes_concurrency, args.episodes_seconds)


if __name__ == "__main__":
    main()
