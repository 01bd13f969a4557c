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


PROBE_CHANNEL = textwrap.dedent("""
    import os, signal, socket
    ppid = lambda pid: int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    worker = os.getppid()
    zygote = ppid(worker)
    supervisor = ppid(zygote)
    outcome = []
    for pid in (1, supervisor, zygote):
        for fd in range(4):
            try:
                os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY))
                outcome.append(f"opened {pid}/{fd}")
            except FileNotFoundError:
                pass
            except OSError:
                outcome.append("denied")
    for probe in (lambda: os.listdir("/run/seal"), lambda: socket.socket(socket.AF_UNIX).connect("/run/seal/s")):
        try:
            probe()
            outcome.append("reached the socket")
        except OSError:
            outcome.append("denied")
    for pid in (1, supervisor):
        for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
                outcome.append(f"signalled {pid}")
            except PermissionError:
                outcome.append("denied")
    print(sorted(set(outcome)), os.getuid(), supervisor != zygote)
""")


@pytest.mark.docker
def test_tool_code_cannot_reach_the_host_channel_through_init_or_the_supervisor(hostile):
    """pid 1 and the supervisor run as root: a tool (nobody) can neither open their fds, reach the socket's
    folder, nor stop or kill them; later episodes of the same warm container score as they should."""
    contents, reward, info = run_episode(hostile, act("run_code", code=PROBE_CHANNEL))
    assert tool_output(contents[0])["stdout"].strip() == "['denied'] 65534 True", contents[0]
    assert reward == 0.0 and info["label"] == "state_mismatch"
    _, reward, info = run_episode(hostile, act("set_value", value=5))
    assert reward == 0.0 and not info["infrastructure_error"]  # a wrong action still scores nothing
    _, reward, info = run_episode(hostile, act("set_value", value=7))
    assert reward == 1.0 and info["label"] == "pass"


def test_references_are_replayed_only_where_no_agent_ran_code():
    """The pool hands reference replays only sandboxes never leased to an episode (backend-independent)."""
    from seal_envs.sandbox import get_pool

    pool = get_pool(SandboxConfig(backend="inprocess", pool_size=2, call_timeout_s=7.0))
    agent = pool.acquire()
    pool.release(agent)
    with pool.pristine() as unused:
        pass
    assert unused.acquired is None  # a cached reference costs no sandbox
    with pool.pristine() as reference:
        reference.reset({"hostile_api:Store": None}, [str(HOSTILE)])
        assert reference.call("hostile_api:Store.set_value", {"value": 7}).ok
    assert reference.acquired is not agent
    with pool.pristine() as again:
        again.snapshot()
    assert again.acquired is reference.acquired  # released as pristine, reused as pristine
    pool.close()


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
    assert all(tool_output(c)["error"].startswith("FileNotFoundError") for c in contents)  # not even there
    answers = _bfcl_answers()
    if answers:
        contents, _, _ = run_episode(hostile, act("read", path=answers))
        assert tool_output(contents[0]) == []


@pytest.mark.docker
def test_only_the_tool_modules_of_a_domain_folder_are_mounted(docker_daemon, tmp_path):
    """Generators, task files under any name or folder, hard links to them: none is in the sandbox; only the
    modules the spec's implementations name are. Domain folders under the host's Python mounts (the bundled
    domains of an editable install) are empty there."""
    from seal_envs.sandbox.image import domain_folders, host_python_mounts, mcp_server_files

    domain = tmp_path / "hostile"
    shutil.copytree(HOSTILE, domain, ignore=shutil.ignore_patterns("twin_*", "__pycache__"))
    (domain / "make_tasks.py").write_text("TASKS = 'regenerated ground truth'\n")
    (domain / "data").mkdir()
    (domain / "data" / "tasks.json").write_text((domain / "tasks.json").read_text())
    (domain / "train_split.json").write_text((domain / "tasks.json").read_text())
    os.link(domain / "tasks.json", domain / "notes.txt")
    for path in (tmp_path, *domain.rglob("*")):
        path.chmod(0o755)
    env = ToolUseEnv(domain=domain, sandbox=CONFIG)
    bundled = [f for f in domain_folders(host_python_mounts())]
    try:
        contents, _, _ = run_episode(env, act("read", path=str(domain)), *(act("read", path=f) for f in bundled))
    finally:
        env.close()
    assert tool_output(contents[0]) == ["hostile_api.py"]
    # a bundled folder shows at most what its spec declares the tools need (an MCP domain's tools.json and server)
    allowed = [{os.path.basename(p) for p in mcp_server_files(f)} for f in bundled]
    assert all(set(tool_output(c)) <= ok for c, ok in zip(contents[1:], allowed)), contents
    assert not any("tasks" in name for c in contents[1:] for name in tool_output(c))


HANG = "import time; time.sleep(30)"
SLOW = "import time; time.sleep(0.3)"


@pytest.mark.docker
def test_one_deadline_bounds_a_step_whatever_hangs(docker_daemon):
    """Slow calls, then hanging ones whose rebuilds replay the slow ones: the step ends within its budget
    (before: each hang cost a call timeout plus a replay, 10-40 s); calls past it are not run."""
    config = SandboxConfig(call_timeout_s=2.0, step_timeout_s=3.0, pool_size=1)
    env = ToolUseEnv(domain=HOSTILE, sandbox=config)
    calls = [ToolCall("run_code", {"code": SLOW})] * 3 + [ToolCall("run_code", {"code": HANG})] * 5
    try:
        env.reset(options={"task_id": env.tasks[0].id})
        start = time.monotonic()
        observation, _, _, _, info = env.step("".join(format_tool_call(c) for c in calls))
        seconds = time.monotonic() - start
    finally:
        env.close()
    errors = [str(tool_output(m["content"]).get("error", "")) for m in observation if m["role"] == "tool"]
    assert all(e.split(":")[0] in ("Timeout", "StepTimeout") for e in errors[3:]) and errors[-1].startswith(
        "StepTimeout"), errors
    assert not info["infrastructure_error"]
    # the budget plus round trips and one rebuild's grace on a loaded 2-core machine (5 x 2 s + replays before)
    assert seconds < config.step_timeout_s + 2.0, seconds


def test_malformed_inputs_are_errors_that_name_the_fix(tmp_path):
    """A deeply nested tools.json is a spec error naming the file; a task_id that is not a string a
    ValueError; a request over the supervisor's limit makes it exit, not spin."""
    from seal_envs.sandbox.image import SERVER_SOURCE

    nested = tmp_path / "tools.json"
    nested.write_text('{"domain": "x", "tools": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SpecError, match="nested too deeply") as raised:
        load_domain(nested)
    assert str(nested) in str(raised.value)
    env = ToolUseEnv(domain=HOSTILE, sandbox="inprocess")
    with pytest.raises(ValueError, match="task_id must be a string"):
        env.reset(options={"task_id": ["x"]})
    env.close()
    server = subprocess.Popen([sys.executable, str(SERVER_SOURCE), "3", "4096"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        server.stdin.write(b"[" * (65 << 20))  # no newline: the line only grows
        server.stdin.flush()
    except BrokenPipeError:
        pass
    assert server.wait(timeout=30) == 0  # it left (the host broke the protocol) instead of spinning


@pytest.mark.docker
def test_an_oversized_task_state_is_the_tasks_error_at_once(docker_daemon):
    from seal_envs.sandbox.docker import DockerSandbox

    box = DockerSandbox(CONFIG)
    try:
        start = time.monotonic()
        with pytest.raises(ValueError, match="over the sandbox's limit"):
            box.reset({"hostile_api:Store": {"value": "x" * (70 << 20)}}, [str(HOSTILE)])
        assert time.monotonic() - start < 5  # before: 48 s, then masked as ours
        box.reset({"hostile_api:Store": None}, [str(HOSTILE)])  # the sandbox is still good
    finally:
        box.close()


@pytest.mark.docker
def test_a_slow_import_during_resolve_is_not_cached(docker_daemon, tmp_path):
    from seal_envs.resolve import resolve_targets

    package = tmp_path / "slow_mod"  # a package: its whole folder is mounted, so the marker's removal shows
    package.mkdir()
    marker = package / "slow"
    (package / "__init__.py").write_text(f"import os, time\nif os.path.exists({str(marker)!r}):\n"
                                         "    time.sleep(30)\nclass Slow:\n    def go(self):\n        return 1\n")
    marker.write_text("")
    for path in (tmp_path, package, *package.iterdir()):
        path.chmod(0o755)
    config = SandboxConfig(call_timeout_s=1.0, pool_size=0)
    first = resolve_targets(["slow_mod:Slow.go"], [str(tmp_path)], "slow-1", config)
    assert "took over" in first["slow_mod:Slow.go"]
    marker.unlink()  # the import is fast now (as when the machine is no longer loaded)
    assert resolve_targets(["slow_mod:Slow.go"], [str(tmp_path)], "slow-1", config) == {}


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
    for flags in (["--sweep"], ["--sweep", "--tool-user", "65534"]):  # outside a sandbox container: never
        refused = subprocess.run([sys.executable, str(SERVER_SOURCE), "3", "4096", *flags], capture_output=True,
                                 text=True, stdin=subprocess.DEVNULL, timeout=30)
        assert refused.returncode != 0 and "refusing --sweep" in refused.stderr


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
    assert time.perf_counter() - start < 1.0  # the bound catches superlinear parsing (minutes at these sizes)
    assert any(reason in e.reason for e in parsed.errors) and len(parsed.calls) <= ParseLimits().max_calls


def test_whitespace_inside_a_call_parses_in_linear_time():
    action = "<tool_call>```json" + " " * 30_000 + '{"name": "a", "arguments": {}}' + " " * 30_000 + "```</tool_call>"
    start = time.perf_counter()
    assert parse_tool_calls(action).calls == (ToolCall("a", {}),)
    assert time.perf_counter() - start < 0.2  # linear: ~1 ms here; the quadratic scan it guards against: ~10 s


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


LINGER = textwrap.dedent("""
    import os, signal, time
    ppid = lambda pid: int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    targets = [1, ppid(ppid(os.getppid()))]  # init and the supervisor
    if os.fork() == 0:  # outlives the call: strikes while the host takes the snapshot
        os.setsid()
        for _ in range(200):
            for pid in targets:
                for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
            time.sleep(0.005)
        os._exit(0)
""")


@pytest.mark.docker
def test_tool_cannot_turn_its_failure_into_a_masked_episode(hostile):
    """A background process that stops, terminates or kills init or the supervisor after its call returned
    cannot: the failing episode stays the agent's (diagnosed, not masked)."""
    _, reward, info = run_episode(hostile, act("run_code", code=LINGER))
    assert not info["infrastructure_error"] and info["label"] == "state_mismatch" and reward == 0.0
    _, reward, info = run_episode(hostile, act("set_value", value=7))
    assert reward == 1.0 and info["label"] == "pass"


@pytest.mark.docker
def test_a_stopped_zygote_costs_the_next_episode_nothing(docker_daemon):
    stop_zygote = textwrap.dedent("""
        import os, signal
        ppid = lambda pid: int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        os.kill(ppid(os.getppid()), signal.SIGSTOP)
    """)
    env = ToolUseEnv(domain=HOSTILE, sandbox=SandboxConfig(call_timeout_s=5.0, pool_size=1))
    try:
        contents, _, _ = run_episode(env, act("run_code", code=stop_zygote), act("set_value", value=1))
        assert tool_output(contents[0])["returncode"] == 0
        start = time.monotonic()
        _, reward, info = run_episode(env, act("set_value", value=7))
        assert reward == 1.0 and info["label"] == "pass"
        # a fresh zygote (~0.3 s: an import), not a spawn waiting out its deadline on the stopped one (15 s before
        # this fix); the bound leaves room for a loaded 2-core machine
        assert time.monotonic() - start < 5.0
    finally:
        env.close()


PARK_IPC = textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    segment = libc.shmget(4242, {size}, 0o1600)
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, {size})  # charged to the container's memory
    libc.msgget(4343, 0o1600)
    libc.semget(4444, 1, 0o1600)
    libc.mq_open(b"/parked", os.O_CREAT | os.O_RDWR, 0o600, None)
    print(segment >= 0)
""")
SEE_IPC = textwrap.dedent("""
    import os
    rows = [len(open("/proc/sysvipc/" + kind).read().splitlines()) - 1 for kind in ("shm", "msg", "sem")]
    big = bytearray({size})  # fits only if the last episode's segment is gone
    print(rows, os.listdir("/dev/mqueue"))
""")


@pytest.mark.docker
def test_no_ipc_object_survives_an_episode(docker_daemon):
    """SysV shared memory, message queues, semaphores and POSIX message queues are removed at reset; memory
    parked in shared memory does not make the next episode's tool run out of memory."""
    size = 150 << 20
    env = ToolUseEnv(domain=HOSTILE, sandbox=SandboxConfig(call_timeout_s=8.0, pool_size=1))
    try:
        contents, _, _ = run_episode(env, act("run_code", code=PARK_IPC.format(size=size)))
        assert tool_output(contents[0])["stdout"].strip() == "True", contents[0]
        contents, _, _ = run_episode(env, act("run_code", code=SEE_IPC.format(size=size)))
        assert tool_output(contents[0])["stdout"].strip() == "[0, 0, 0] []", contents[0]
    finally:
        env.close()


@pytest.mark.docker
def test_a_patched_reply_is_the_tools_protocol_error(hostile):
    """Tool code that patches its own reply channel (extra keys, a forged state) gets a ProtocolError for
    that call; nothing of it reaches the host and the episode goes on."""
    for extra in ({"failure": {"x": 1}}, {"state": {"hostile_api:Store": {"value": 7}}}, {"ok": "yes"}):
        contents, reward, info = run_episode(hostile, act("forge_reply", extra=extra), act("set_value", value=7))
        assert tool_output(contents[0])["error"].startswith("ProtocolError"), contents[0]
        assert reward == 1.0 and info["label"] == "pass"  # the episode was rebuilt without the patch


def test_replies_are_checked_against_a_strict_schema():
    from seal_envs.sandbox.server import checked_reply

    assert checked_reply("call", {"ok": True, "result": [1], "text": "[1]"}, 100) == {
        "ok": True, "result": [1], "text": "[1]"}
    assert checked_reply("call", {"ok": False, "error": {"type": "E", "message": "m" * 500}, "lost": True}, 10,
                         flags=("lost",))["error"]["message"].startswith("m" * 10 + " [truncated")
    for op, forged in [("call", {"ok": True, "result": 1, "text": "1", "failure": {}}),
                       ("call", {"ok": True, "result": 1}), ("call", {"ok": 1, "result": 1, "text": "1"}),
                       ("call", {"ok": False, "error": "boom"}), ("call", {"ok": False, "error": {"type": 3}}),
                       ("call", {"ok": False, "error": {"type": "E", "message": "m"}, "lost": True}),
                       ("snapshot", {"ok": True, "state": [1]}), ("resolve", {"ok": True, "problems": {"a": 1}}),
                       ("reset", {"ok": True, "state": {}}), ("nope", {"ok": True}), ("call", [1])]:
        with pytest.raises(ValueError):
            checked_reply(op, forged, 100)


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
