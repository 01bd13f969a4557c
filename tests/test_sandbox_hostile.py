"""Each attack of the sandbox red-team (issue 10), reproduced against the Docker backend and shown harmless.

The hostile fixture domain (``tests/fixtures/hostile``) attacks from inside tool code; the twins share a
module name. See docs/SANDBOX.md for the threat model these tests pin down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from seal_envs.env import ToolUseEnv, schema_violations
from seal_envs.parsing import ParseLimits, format_tool_call, parse_tool_calls
from seal_envs.sandbox import SandboxConfig
from seal_envs.spec import SpecError, load_domain
from seal_envs.task import ToolCall

from conftest import FIXTURES

HOSTILE = FIXTURES / "hostile"
TWINS = (HOSTILE / "twin_a", HOSTILE / "twin_b")
CONFIG = SandboxConfig(call_timeout_s=3.0, pool_size=1, max_output_bytes=4096)
REPO = Path(__file__).resolve().parents[1]


def act(name: str, **arguments) -> str:
    return format_tool_call(ToolCall(name, arguments))


def run_episode(env: ToolUseEnv, *actions: str, task_id: str | None = None):
    """Reset, take ``actions``, answer; returns (last tool observation contents, reward, last info)."""
    env.reset(options={"task_id": task_id or env.tasks[0].id})
    contents = []
    for action in actions:
        observation, *_ = env.step(action)
        contents += [m["content"] for m in observation if m["role"] == "tool"]
    _, reward, terminated, _, info = env.step("Done.")
    assert terminated
    return contents, reward, info


@pytest.fixture
def hostile(docker_daemon):
    env = ToolUseEnv(domain=HOSTILE, sandbox=CONFIG)
    yield env
    env.close()


def tool_output(content: str):
    """A tool message's result: JSON, or the plain text a tool returned as a string."""
    text = content.split("\n\n")[0]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# ------------------------------------------------------------------------------ reward integrity


@pytest.mark.docker
def test_forged_replies_on_stdout_and_garbage_lines_change_nothing(hostile):
    forged = "\n".join(json.dumps({"id": i, "ok": True, "result": {"value": 7},
                                   "state": {"hostile_api:Store": {"value": 7}}}) for i in range(1, 50))
    contents, reward, info = run_episode(hostile, act("write_fd", text=forged))
    assert tool_output(contents[0]) == "written"
    assert reward == 0.0 and info["label"] == "state_mismatch"  # the forgery scored nothing and was not masked
    _, reward, info = run_episode(hostile, act("write_fd", text=forged), act("set_value", value=7))
    assert reward == 1.0 and info["label"] == "pass"  # no desync: every reply belongs to its call


@pytest.mark.docker
def test_tool_code_cannot_reach_the_reply_channel_through_proc(hostile):
    """The supervisor and the zygotes are non-dumpable: their fds and memory are closed to tool code."""
    code = textwrap.dedent("""
        import os
        ppid = lambda pid: int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        worker = os.getppid()
        zygote = ppid(worker)
        supervisor = ppid(zygote)
        for pid in (zygote, supervisor):
            try:
                os.write(os.open(f"/proc/{pid}/fd/1", os.O_WRONLY), b'{"ok": true}\\n')
                print("wrote", end=" ")
            except OSError as exc:
                print(type(exc).__name__, end=" ")
    """)
    contents, reward, _ = run_episode(hostile, act("run_code", code=code))
    assert tool_output(contents[0])["stdout"] == "PermissionError PermissionError ", contents[0]
    assert reward == 0.0


@pytest.mark.docker
def test_no_state_files_processes_or_patches_survive_an_episode(hostile, docker_daemon):
    contents, _, _ = run_episode(hostile, act("inspect"))
    baseline = tool_output(contents[0])
    contents, _, _ = run_episode(hostile, act("poison"), act("set_value", value=7))
    assert tool_output(contents[0]) == "poisoned"  # whatever it did to its own episode, it ends here
    assert docker_daemon.api.inspect_container(hostile._sandbox.container_id)["HostConfig"]["NanoCpus"] == 10**9
    contents, reward, info = run_episode(hostile, act("inspect"))
    assert tool_output(contents[0]) == baseline  # no class attribute, /tmp file or background process left
    assert reward == 0.0 and info["label"] == "state_mismatch"  # the patched snapshot is gone too
    _, reward, info = run_episode(hostile, act("set_value", value=7))
    assert reward == 1.0 and info["label"] == "pass"


@pytest.mark.docker
def test_domains_sharing_a_module_name_each_run_their_own_code(docker_daemon):
    envs = [ToolUseEnv(domain=twin, sandbox=CONFIG) for twin in TWINS]
    try:
        for round_ in range(3):
            for offset, env in enumerate(envs, start=1):
                contents, reward, info = run_episode(env, act("bump", by=1))
                assert tool_output(contents[0]) == {"count": 1 + offset} and reward == 1.0, (round_, info)
    finally:
        for env in envs:
            env.close()


def test_one_env_refuses_two_domains_with_the_same_module_name(tmp_path):
    renamed = tmp_path / "twin"
    shutil.copytree(TWINS[1], renamed)
    spec = json.loads((renamed / "tools.json").read_text())
    spec["tools"][0]["name"] = "bump_b"
    (renamed / "tools.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="module named 'api'"):
        ToolUseEnv(domain=[TWINS[0], renamed], sandbox="inprocess")


@pytest.mark.docker
def test_edited_domain_code_runs_in_the_next_env(docker_daemon, tmp_path):
    domain = tmp_path / "twin"
    shutil.copytree(TWINS[0], domain)
    for path in (domain, *domain.iterdir()):
        path.chmod(0o755)
    for increment in (1, 10):
        (domain / "api.py").write_text((TWINS[0] / "api.py").read_text().replace("by + 1", f"by + {increment}"))
        env = ToolUseEnv(domain=domain, sandbox=CONFIG)
        contents, reward, _ = run_episode(env, act("bump", by=1))
        env.close()
        assert tool_output(contents[0]) == {"count": 1 + increment} and reward == 1.0  # new code, new reference


@pytest.mark.docker
def test_ground_truth_is_not_readable_inside_the_sandbox(hostile):
    from seal_envs.sandbox.image import _bfcl_answers

    targets = [str(HOSTILE / "tasks.json"), str(TWINS[0] / "tasks.json")]
    contents, _, _ = run_episode(hostile, *(act("read", path=p) for p in targets))
    assert [tool_output(c) for c in contents] == ["", ""]
    answers = _bfcl_answers()
    if answers:
        contents, _, _ = run_episode(hostile, act("read", path=answers))
        assert tool_output(contents[0]) == []


# ------------------------------------------------------------------------------ host safety


def test_spec_pointers_cannot_reach_outside_the_domain(tmp_path):
    def spec(**extra):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))  # one folder per spec: the loader caches by file
        folder.mkdir()
        (folder / "tools.json").write_text(json.dumps({**json.loads((TWINS[0] / "tools.json").read_text()), **extra}))
        return load_domain(folder)

    marker = tmp_path / "ran"
    with pytest.raises(ValueError, match="must be a file of the domain's folder"):
        spec(task_splits="os:system").split_tasks(f"touch {marker}")
    assert not marker.exists()
    for escape in (["/etc"], ["../.."], ["."] + ["/"], ["/proc"], ["/tmp"]):
        with pytest.raises(SpecError, match="python_paths"):
            spec(python_paths=escape)


def test_server_outside_a_container_touches_only_its_own_episodes(tmp_path):
    """Without --sweep (the host, a debugger) reset kills only the worker's group and removes only its dir."""
    from seal_envs.sandbox.image import SERVER_SOURCE

    scratch = tmp_path / "scratch"
    (scratch / "other").mkdir(parents=True)
    (scratch / "other" / "keep").write_text("not ours")
    server = subprocess.Popen([sys.executable, str(SERVER_SOURCE), "3", "4096"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env={**os.environ, "SEAL_SANDBOX_SCRATCH": str(scratch)})

    def request(message: dict) -> dict:
        server.stdin.write(json.dumps(message).encode() + b"\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    reset = {"op": "reset", "classes": {"hostile_api:Store": None}, "python_paths": [str(HOSTILE)], "id": 1}
    try:
        assert request(reset)["ok"]
        assert request({"op": "call", "target": "hostile_api:Store.set_value", "arguments": {"value": 3}})["ok"]
        first = {p.name for p in scratch.iterdir()} - {"other"}
        assert request(reset)["ok"]
        assert (scratch / "other" / "keep").read_text() == "not ours"
        assert not first & {p.name for p in scratch.iterdir()}  # the earlier episode's dir is gone
    finally:
        server.stdin.close()
        server.wait(10)
    if os.geteuid() == 0:
        refused = subprocess.run([sys.executable, str(SERVER_SOURCE), "3", "4096", "--sweep"], capture_output=True,
                                 text=True, stdin=subprocess.DEVNULL, timeout=30)
        assert refused.returncode != 0 and "refusing --sweep as root" in refused.stderr


def run_python(code: str, *prefix: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([*prefix, sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


OWNER = f"""
    import time
    from seal_envs.sandbox import SandboxConfig
    from seal_envs.sandbox.docker import DockerSandbox
    box = DockerSandbox(SandboxConfig(call_timeout_s=2.0))
    box.reset({{"hostile_api:Store": None}}, [{str(HOSTILE)!r}])
    print(box.container_id, flush=True)
"""


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_reaper_spares_live_sandboxes_of_another_pid_namespace(docker_daemon):
    from seal_envs.sandbox.reaper import reap

    owner = run_python(OWNER + "    time.sleep(600)\n", "unshare", "--pid", "--kill-child", "--mount-proc")
    container = owner.stdout.readline().strip()
    try:
        assert container, owner.stderr.read()
        assert container not in reap(docker_daemon)  # its owner's pid means nothing in our namespace
        assert docker_daemon.api.inspect_container(container)["State"]["Running"]
    finally:
        owner.kill()  # --kill-child: the owner inside the namespace dies with unshare, not 600 s later
        owner.wait(10)
        docker_daemon.api.remove_container(container, force=True)


@pytest.mark.docker
def test_sandbox_in_a_hung_call_stops_soon_after_its_owner_dies(docker_daemon):
    owner = run_python(OWNER + """
    import threading
    threading.Thread(target=box.call, args=("hostile_api:Store.run_code", {"code": "while True: pass"})).start()
    time.sleep(600)
    """)
    container = owner.stdout.readline().strip()
    time.sleep(0.5)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(10)
    deadline = time.monotonic() + 15
    try:
        while docker_daemon.api.inspect_container(container)["State"]["Running"]:
            assert time.monotonic() < deadline, "the orphaned sandbox kept running"
            time.sleep(0.2)
    finally:
        docker_daemon.api.remove_container(container, force=True)


# ------------------------------------------------------------------------------ bounded work


@pytest.mark.parametrize("action, reason", [
    ("<tool_call>" + " " * 80_000 + '{"name": "set_value", "arguments": {}}' + " " * 80_000 + "</tool_call>",
     "characters; at most"),
    ("<tool_call>{'name': 'set_value', 'arguments': {'value': [" + "1, " * 100_000 + "]}}</tool_call>",
     "characters; at most"),
    ('<tool_call>{"name": "set_value", "arguments": {}}</tool_call>' * 10_000, "more than 64 tool calls"),
    *[(f"<tool_call>{{'name': 'set_value', 'arguments': {{'value': {literal}}}}}</tool_call>", "not a JSON object")
      for literal in ("{1, 2}", "b'x'", "1j", "...", "frozenset()")],
])
def test_parse_cost_and_values_are_bounded(action, reason):
    start = time.perf_counter()
    parsed = parse_tool_calls(action)
    assert time.perf_counter() - start < 1.0
    assert any(reason in e.reason for e in parsed.errors) and len(parsed.calls) <= ParseLimits().max_calls


def test_whitespace_inside_a_call_parses_in_linear_time():
    action = "<tool_call>```json" + " " * 30_000 + '{"name": "a", "arguments": {}}' + " " * 30_000 + "```</tool_call>"
    start = time.perf_counter()
    assert parse_tool_calls(action).calls == (ToolCall("a", {}),)
    assert time.perf_counter() - start < 0.2


@pytest.mark.docker
def test_observations_are_capped_valid_unicode_and_patterns_time_out(hostile):
    actions = (act("huge_error", size=400_000), act("surrogate"), act("lookup", path="a" * 40 + "!"))
    start = time.perf_counter()
    contents, _, info = run_episode(hostile, *actions)
    assert time.perf_counter() - start < 5
    assert len(contents[0]) < 2 * CONFIG.max_output_bytes and "truncated" in contents[0]
    assert all(c.encode("utf-8") for c in contents) and "\ufffd" in contents[1]
    assert info["label"] == "argument_mismatch"
    violations = schema_violations(hostile.tools["lookup"], {"path": "a" * 40 + "!"}, pattern_timeout_s=0.05)
    assert "took over 0.05 s" in violations[0]["message"]


# ------------------------------------------------------------------------------ fault attribution


@pytest.mark.docker
def test_tool_that_kills_its_server_is_its_own_failure(hostile):
    contents, reward, info = run_episode(hostile, act("kill_everything"), act("set_value", value=7))
    assert not info["infrastructure_error"] and info["label"] != "infrastructure_error"
    assert reward == 1.0  # the state was rebuilt in a fresh sandbox and the episode went on


@pytest.mark.docker
def test_tool_that_stops_its_server_is_its_own_timeout(docker_daemon):
    """SIGSTOP on the supervisor: the host's deadline fires; the daemon still answers, so it is the tool's."""
    stop = textwrap.dedent("""
        import os, signal
        ppid = lambda pid: int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        os.kill(ppid(ppid(os.getppid())), signal.SIGSTOP)
    """)
    env = ToolUseEnv(domain=HOSTILE, sandbox=SandboxConfig(call_timeout_s=1.0, pool_size=1))
    contents, reward, info = run_episode(env, act("run_code", code=stop), act("set_value", value=7))
    env.close()
    assert tool_output(contents[0])["error"].startswith("Timeout") and not info["infrastructure_error"]
    assert reward == 1.0


@pytest.mark.docker
def test_dead_warm_sandbox_is_replaced_not_blamed_on_the_task(docker_daemon):
    from seal_envs.sandbox import get_pool

    config = SandboxConfig(call_timeout_s=3.5, pool_size=1)  # a pool of its own
    pool = get_pool(config)
    warm = pool.acquire()
    docker_daemon.api.remove_container(warm.container_id, force=True)  # as a daemon restart would
    pool.release(warm)  # nobody noticed: it goes back as warm
    env = ToolUseEnv(domain=HOSTILE, sandbox=config)
    _, reward, info = run_episode(env, act("set_value", value=7))
    assert reward == 1.0 and not info.get("task_error")
    env.close()


class FrozenDaemon:
    """A unix socket that accepts connections and never answers, like a daemon stuck on a lock."""

    def __init__(self, path: Path):
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(64)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.server.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.server.close()
        for held in self.held:
            held.close()


EPISODE_WITHOUT_DAEMON = f"""
    import time
    from seal_envs.env import ToolUseEnv
    from seal_envs.sandbox import SandboxConfig
    env = ToolUseEnv(domain={str(HOSTILE)!r}, sandbox=SandboxConfig(daemon_timeout_s=1.0, pool_size=0))
    start = time.monotonic()
    _, info = env.reset()
    _, reward, terminated, _, step_info = env.step("hello")
    print(round(time.monotonic() - start, 1), info["infrastructure_error"], reward, terminated,
          step_info["label"], flush=True)
"""


@pytest.mark.parametrize("frozen", [False, True], ids=["down", "frozen"])
def test_daemon_down_or_frozen_masks_the_episode_quickly(tmp_path, frozen):
    sock = tmp_path / "docker.sock"
    daemon = FrozenDaemon(sock) if frozen else None
    try:
        child = run_python(EPISODE_WITHOUT_DAEMON, DOCKER_HOST=f"unix://{sock}")
        out, err = child.communicate(timeout=60)
    finally:
        if daemon:
            daemon.close()
    assert child.returncode == 0, err[-2000:]
    seconds, masked, reward, terminated, label = out.split()
    assert float(seconds) < 10 and masked == "True" and (reward, terminated, label) == (
        "0.0", "True", "infrastructure_error")
