"""The Docker sandbox against a real daemon: protocol, isolation, failure attribution, pool, cleanup.

Needs a daemon (``bash .ci/dockerd.sh start``; export the DOCKER_HOST it prints). Skipped locally without
one; with CI=true an unreachable daemon fails (see conftest's ``docker_daemon``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from seal_envs.sandbox import CallResult, SandboxConfig
from seal_envs.sandbox.pool import SandboxPool

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).parent / "fixtures"
PATHS = [str(FIXTURES / "evil")]
EVIL = "evil_tools:EvilTools"
CLASSES = {EVIL: {"counter": 5, "notes": ["a"]}}
CONFIG = SandboxConfig(call_timeout_s=2.0, mem_limit="128m", pids_limit=32, max_output_bytes=4096, pool_size=2)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _daemon(docker_daemon):
    return docker_daemon


def own_containers(client, pid: int | None = None) -> list[dict]:
    return client.api.containers(all=True, filters={"label": [f"seal.owner_pid={pid or os.getpid()}"]})


@pytest.fixture(scope="module")
def pool():
    from seal_envs.sandbox.docker import DockerSandbox

    pool = SandboxPool(lambda: DockerSandbox(CONFIG), CONFIG)
    yield pool
    pool.close()


@pytest.fixture
def sandbox(pool):
    box = pool.acquire()
    box.reset(CLASSES, PATHS)
    yield box
    pool.release(box)


def call(box, method: str, **arguments) -> CallResult:
    return box.call(f"{EVIL}.{method}", arguments)


def test_round_trip_state_and_snapshot(sandbox):
    assert call(sandbox, "add", amount=2) == CallResult(ok=True, output={"counter": 7})
    assert call(sandbox, "echo", text="héllo\n{}").output == "héllo\n{}"
    assert sandbox.snapshot() == {EVIL: {"counter": 7, "notes": ["a"]}}
    sandbox.reset(CLASSES, PATHS)  # a fresh episode: the state is loaded again
    assert sandbox.snapshot() == {EVIL: {"counter": 5, "notes": ["a"]}}


def test_runs_as_nobody_with_isolation(sandbox, docker_daemon):
    assert call(sandbox, "whoami").output["uid"] == 65534
    host = docker_daemon.api.inspect_container(sandbox.container_id)["HostConfig"]
    from seal_envs.sandbox.docker import SANDBOX_CAPABILITIES

    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == sorted(f"CAP_{c}" for c in SANDBOX_CAPABILITIES) or sorted(
        host["CapAdd"]) == sorted(SANDBOX_CAPABILITIES)  # the supervisor's; tool code (uid 65534) has none
    assert host["SecurityOpt"] == ["no-new-privileges"] and host["Init"] and host["PidsLimit"] == 32
    assert host["Memory"] == 128 << 20 and host["IpcMode"] == "none" and not host.get("Binds")
    assert host["Mounts"] and all(m["ReadOnly"] for m in host["Mounts"])


def test_tool_exception_is_an_error_result(sandbox):
    result = call(sandbox, "fail", message="boom")
    assert (result.ok, result.error_type, result.error, result.infrastructure) == (False, "RuntimeError", "boom", False)
    assert sandbox.alive and call(sandbox, "add", amount=1).ok
    unknown = sandbox.call("evil_tools:Nope.x", {})
    assert not unknown.ok and unknown.error_type == "LookupError"


def test_unloadable_state_is_a_value_error(sandbox):
    with pytest.raises(ValueError, match="cannot load the task state"):
        sandbox.reset({"no_such_module:X": None}, PATHS)
    assert sandbox.alive


def test_output_is_capped(sandbox):
    capped = call(sandbox, "big_output", size=100_000)
    assert capped.ok and len(capped.output["truncated_output"]) == CONFIG.max_output_bytes
    huge_error = call(sandbox, "fail", message="e" * 200_000)  # errors are capped like outputs
    assert huge_error.error_type == "RuntimeError" and not huge_error.infrastructure
    assert len(huge_error.error) < CONFIG.max_output_bytes + 100 and "truncated" in huge_error.error
    assert sandbox.alive and call(sandbox, "add", amount=1).ok  # the stream stays in sync
    assert call(sandbox, "print_noise", size=1_000_000).output == "printed"


def test_hung_tool_times_out_and_the_episode_goes_on(pool):
    box = pool.acquire()
    box.reset(CLASSES, PATHS)
    assert call(box, "add", amount=1).ok
    start = time.monotonic()
    result = call(box, "hang")
    assert result.error_type == "Timeout" and not result.infrastructure
    assert time.monotonic() - start < CONFIG.call_timeout_s + 2
    assert box.alive  # the supervisor killed the episode process and rebuilt its state
    assert call(box, "add", amount=1).output == {"counter": 7}
    pool.release(box)


@pytest.mark.parametrize("method, arguments, error_type", [
    ("network", {}, "ConnectionRefusedError"),
    ("write_file", {"path": "/etc/passwd"}, "OSError"),
    ("write_file", {"path": sys.prefix + "/evil"}, "OSError"),
    ("fork_bomb", {}, "BlockingIOError"),
    ("allocate", {"megabytes": 400}, "OutOfMemory"),
    ("crash", {}, "SandboxCrashed"),
])
def test_misbehaving_tool_is_contained(pool, method, arguments, error_type):
    """Each is the tool's failure (diagnosed, not masked); the episode's state survives it, and the next
    episode starts clean."""
    box = pool.acquire()
    box.reset(CLASSES, PATHS)
    assert call(box, "add", amount=1).ok
    result = call(box, method, **arguments)
    assert not result.ok and result.error_type == error_type and not result.infrastructure, result
    assert box.alive and box.snapshot()[EVIL]["counter"] == 6
    box.reset(CLASSES, PATHS)
    assert call(box, "add", amount=1).output == {"counter": 6}
    pool.release(box)


def test_container_removed_from_outside_is_infrastructure(pool, docker_daemon):
    box = pool.acquire()
    box.reset(CLASSES, PATHS)
    docker_daemon.api.remove_container(box.container_id, force=True)
    result = call(box, "add", amount=1)
    assert not result.ok and result.infrastructure and result.error_type == "SandboxLost"
    pool.discard(box)


def test_tmpfs_write_works_and_new_python_paths_are_mounted(pool, tmp_path):
    (tmp_path / "extra_mod.py").write_text("class Extra:\n    def hi(self):\n        return 'hi'\n")
    (tmp_path / "extra_mod.py").chmod(0o600)
    (tmp_path / "tasks.json").write_text("{}")
    box = pool.acquire()
    with pytest.raises(ValueError, match="o\\+r its files"):  # nobody could not read the module in the container
        box.reset({"extra_mod:Extra": None}, [str(tmp_path)])
    (tmp_path / "extra_mod.py").chmod(0o644)  # its private folder is fine: only the module is bound
    box.reset(CLASSES, PATHS)
    assert call(box, "write_file", path="/tmp/ok").output == "written"
    box.reset({"extra_mod:Extra": None, **CLASSES}, [*PATHS, str(tmp_path)])  # restarts once with the mount
    assert box.call("extra_mod:Extra.hi", {}).output == "hi"
    pool.release(box)


def test_pool_reuses_warm_sandboxes_and_resets_fast(pool):
    box = pool.acquire()
    pool.release(box)
    again = pool.acquire()
    assert again is box
    timings = []
    for _ in range(20):
        start = time.perf_counter()
        again.reset(CLASSES, PATHS)
        timings.append(time.perf_counter() - start)
    pool.release(again)
    # A reset forks a worker; a reset that started a container instead takes >= 0.4 s on these machines: the
    # bound tells the two apart even on a loaded 2-core machine. Speed itself: benchmarks/sandbox_bench.py.
    assert sorted(timings)[10] < 0.2
    deadline = time.monotonic() + 10
    while pool.idle_count < CONFIG.pool_size and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.idle_count == CONFIG.pool_size  # the refiller keeps the pool warm
    start = time.perf_counter()
    warm = pool.acquire()
    warm.reset(CLASSES, PATHS)
    assert time.perf_counter() - start < 0.2  # warm, not a container start (same reason as above)
    pool.release(warm)


def test_many_threads_and_asyncio_tasks(pool):
    errors: list[BaseException] = []

    def episode(i: int) -> None:
        try:
            box = pool.acquire()
            box.reset({EVIL: {"counter": i}}, PATHS)
            for _ in range(10):
                result = call(box, "add", amount=1)
                assert result.ok, result
            assert box.snapshot()[EVIL]["counter"] == i + 10
            pool.release(box)
        except BaseException as exc:  # collected: assertion errors in threads are otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]

    async def main() -> None:
        await asyncio.gather(*(asyncio.to_thread(episode, i) for i in range(8)))

    asyncio.run(main())
    assert not errors, errors[:3]


def test_pool_close_leaves_nothing(docker_daemon):
    from seal_envs.sandbox.docker import DockerSandbox

    before = {c["Id"] for c in own_containers(docker_daemon)}
    config = SandboxConfig(pool_size=2)
    pool = SandboxPool(lambda: DockerSandbox(config), config)
    leased = pool.acquire()
    leased.reset(CLASSES, PATHS)
    pool.close()
    assert not leased.alive
    assert {c["Id"] for c in own_containers(docker_daemon)} <= before


def _child_episode() -> None:
    from seal_envs.sandbox import get_pool

    box = get_pool(CONFIG).acquire()
    box.reset(CLASSES, PATHS)
    assert call(box, "add", amount=1).output == {"counter": 6}


def test_forked_worker_has_its_own_pool_and_cleans_up(pool, docker_daemon):
    import multiprocessing

    mine = pool.acquire()  # the parent holds containers and a refiller thread while forking
    child = multiprocessing.get_context("fork").Process(target=_child_episode)
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert own_containers(docker_daemon, child.pid) == []
    mine.reset(CLASSES, PATHS)
    assert call(mine, "add", amount=1).ok  # the child did not touch the parent's sandboxes
    pool.release(mine)


def run_python(code: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


OWNER = f"""
    import sys, time
    from seal_envs.sandbox import SandboxConfig, get_pool
    pool = get_pool(SandboxConfig(pool_size=2))
    box = pool.acquire()
    box.reset({CLASSES!r}, {PATHS!r})
    while pool.idle_count < 2:
        time.sleep(0.05)
    print("ready", flush=True)
"""


def test_interpreter_exit_leaves_nothing(docker_daemon):
    child = run_python(OWNER)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and "ready" in out, err
    assert own_containers(docker_daemon, child.pid) == []


def test_killed_process_is_reaped(docker_daemon):
    from seal_envs.sandbox.reaper import reap

    child = run_python(OWNER + "\n    time.sleep(600)\n")
    assert child.stdout.readline().strip() == "ready"
    assert len(own_containers(docker_daemon, child.pid)) == 3
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    removed = reap(docker_daemon)
    assert len(removed) >= 3 and own_containers(docker_daemon, child.pid) == []


def test_unreachable_daemon_explains_the_fix():
    child = run_python("""
        from seal_envs.sandbox.docker import DockerSandbox
        DockerSandbox()
    """, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    _, err = child.communicate(timeout=60)
    assert child.returncode != 0 and "dockerd.sh start" in err and "DOCKER_HOST" in err
