"""LLM users on tau2's user-simulator protocol (issue 22), with real components: the tiny Hugging Face model as the
user, directly and behind an OpenAI-compatible HTTP server in this process; a shop task carries a user scenario
so that the episodes run in seconds (tau2 airline's own episodes start its 3 MB database several times)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.evaluation.policies import HFConfig, HFPolicy, ReplayPolicy
from seal_envs.evaluation.runner import run_episode
from seal_envs.evaluation.tau2 import tau2_verdict
from seal_envs.task import load_tasks
from seal_envs.users import GREETING, UserConfig, system_prompt, user_stop
from seal_envs.users.conversation import conversation_task
from seal_trainer.tiny import build_tiny_model

SCENARIO = {"persona": None, "instructions": {
    "domain": "shop", "reason_for_call": "You want two wireless earbuds under $80.",
    "known_info": "You pay by credit card.", "unknown_info": None,
    "task_instructions": "Check out with standard shipping.\nAsk for the order number."}}


def shop_task():
    task = next(t for t in load_tasks("shop") if t.id == "shop_base_001")
    return replace(task, metadata={**task.metadata, "user_scenario": SCENARIO})


class Server:
    """An OpenAI-compatible endpoint in this process; ``mode`` "model" answers from the tiny model (sampled, seeded:
    its greedy output is blank lines), "replies" with ``replies`` in turn (the tiny model never writes a stop
    token), the others misbehave as named. It keeps every request it answered."""

    def __init__(self, mode: str = "model", model_path: str | None = None, replies: tuple[str, ...] = ()):
        self.mode, self.requests, self.replies = mode, [], replies
        self.model = HFPolicy(HFConfig(str(model_path), max_new_tokens=12, temperature=1.0, device="cpu")) \
            if mode == "model" else None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.send(200, json.dumps({"data": [{"id": "tiny"}]}).encode())

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(request)
                if outer.mode == "error":
                    return self.send(500, b'{"error": "overloaded"}')
                if outer.mode == "garbage":
                    return self.send(200, b"<html>not json</html>")
                if outer.mode == "hang":  # past the client's timeout, then no answer at all
                    return time.sleep(3)
                if outer.mode == "replies":
                    content = outer.replies[len(outer.requests) - 1]
                else:
                    content = "   " if outer.mode == "empty" else outer.model.act(request["messages"], [], 0)
                self.send(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model()


class StoppingAgent(ReplayPolicy):
    """The ground truth's calls, then an answer with tau2's agent stop token."""

    def act(self, messages, tools, turn):
        text = super().act(messages, tools, turn)
        return text if "<tool_call>" in text else f"{text} ###STOP###"


class FailingAgent(ReplayPolicy):
    """Calls a tool that does not exist, every step."""

    def act(self, messages, tools, turn):
        return '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>'


def play(user: UserConfig, policy=None):
    task = shop_task()
    env = ToolUseEnv(domain="shop", tasks=[task], sandbox="inprocess", user=user)
    try:
        return run_episode(env, policy or ReplayPolicy(), task)
    finally:
        env.close()


def test_the_prompt_is_taus_guidelines_then_the_scenario_as_tau2_renders_it():
    prompt = system_prompt(SCENARIO)
    assert prompt.startswith("# User Simulation Guidelines\n")
    assert "'###STOP###'" in prompt and "'###TRANSFER###'" in prompt and "'###OUT-OF-SCOPE###'" in prompt
    assert prompt.endswith("<scenario>\nInstructions:\n\tDomain: shop\n\tReason for call:\n\t\tYou want two wireless "
                           "earbuds under $80.\n\tKnown info:\n\t\tYou pay by credit card.\n\tTask instructions:\n"
                           "\t\tCheck out with standard shipping.\n\t\tAsk for the order number.\n</scenario>")
    assert "Persona:\n\tA terse traveller.\nInstructions:" in system_prompt({**SCENARIO, "persona": "A terse traveller."})


def test_stop_tokens_and_user_specs():
    assert [user_stop(t) for t in ("Thanks! ###STOP###", "###TRANSFER###", "x ###OUT-OF-SCOPE###", "stop")] == \
        ["user_stop", "transfer", "out_of_scope", None]
    assert UserConfig.parse("openai:http://h:1/v1", model="m").spec == "openai:http://h:1/v1"
    assert UserConfig.parse("hf:/models/x").target == "/models/x" and not UserConfig.parse("scripted").conversational
    for bad in ("openai", "hf:", "scripted:x", "llm:x"):
        with pytest.raises(ValueError, match="user"):
            UserConfig.parse(bad)
    task = next(t for t in load_tasks("shop") if t.id == "shop_base_001")
    with pytest.raises(ValueError, match="has none: use user='scripted'"):
        conversation_task(task, UserConfig.parse("hf:/x"))


def test_an_openai_compatible_user_plays_the_conversation_with_taus_protocol(tiny):
    server = Server("model", tiny)
    try:
        record = play(UserConfig(kind="openai", target=server.url, temperature=1.0, max_steps=8))
    finally:
        server.close()
    first = server.requests[0]
    assert first["model"] == "tiny" and first["temperature"] == 1.0  # the endpoint's only model
    assert first["messages"] == [{"role": "system", "content": system_prompt(SCENARIO)},
                                 {"role": "user", "content": GREETING}]
    # the user sees the agent's texts as "user" and its own messages as "assistant"; never a tool call or result
    later = server.requests[1]["messages"]
    assert [m["role"] for m in later] == ["system", "user", "assistant", "user"]
    assert record.messages[0] == {"role": "assistant", "content": GREETING}  # shop has no system prompt
    assert later[2]["content"] == record.messages[1]["content"] and later[3]["content"].startswith("Done.")
    assert record.termination == "max_steps" and not record.infrastructure_error
    # one conversation turn judged against every ground-truth call: the replay solved it
    assert record.reward == 1.0 and record.labels == ["pass"] and len(record.calls) == 1
    roles = [m["role"] for m in record.messages]
    assert roles.count("user") == len(server.requests)


def test_a_local_hf_user_plays_the_conversation(tiny):
    record = play(UserConfig(kind="hf", target=str(tiny), temperature=1.0, max_tokens=12, max_steps=6))
    user_texts = [m["content"] for m in record.messages if m["role"] == "user"]
    assert record.termination == "max_steps" and len(user_texts) == 3 and all(t.strip() for t in user_texts)
    assert record.reward == 1.0 and record.labels == ["pass"]
    again = play(UserConfig(kind="hf", target=str(tiny), temperature=1.0, max_tokens=12, max_steps=6))
    assert again.messages == record.messages  # seeded: the same user replies
    stopped = play(UserConfig(kind="hf", target=str(tiny), temperature=1.0, max_tokens=12), StoppingAgent())
    assert stopped.termination == "agent_stop" and stopped.reward == 1.0
    assert [m["role"] for m in stopped.messages].count("user") == 1  # the agent's stop gets no reply
    failing = play(UserConfig(kind="hf", target=str(tiny), temperature=1.0, max_tokens=12, max_errors=3),
                   FailingAgent())
    assert failing.termination == "too_many_errors" and sum(map(len, failing.calls[0])) == 3
    assert failing.reward == 0.0 and failing.labels == ["invalid_tool_call"]


@pytest.mark.parametrize("replies, termination, reward", [
    (("I want two earbuds under $80.", "Great, thanks! ###STOP###"), "user_stop", 1.0),
    (("I want two earbuds under $80.", "Let me talk to a human. ###TRANSFER###"), "transfer", 1.0),
    (("Sorry, wrong number. ###OUT-OF-SCOPE###",), "out_of_scope", 0.0)])
def test_the_users_stop_tokens_end_the_conversation(replies, termination, reward):
    server = Server("replies", replies=replies)
    try:
        record = play(UserConfig(kind="openai", target=server.url, model="m"))
    finally:
        server.close()
    assert record.termination == termination and record.reward == reward and len(server.requests) == len(replies)
    assert [m["content"] for m in record.messages if m["role"] == "user"] == list(replies)
    if len(replies) == 1:  # the user ended it in its first message: the agent's action is not played
        assert record.calls == [[[]]] and record.labels == ["empty_turn_model_response"]
    else:
        assert record.labels == ["pass"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode, reason", [("error", "HTTP 500"), ("garbage", "not JSON"),
                                          ("hang", "timed out"), ("empty", "empty message")])
def test_a_broken_user_endpoint_is_an_infrastructure_error_never_a_crash(mode, reason):
    server = Server(mode)
    try:
        record = play(UserConfig(kind="openai", target=server.url, model="m", timeout_s=1.0))
    finally:
        server.close()
    assert record.infrastructure_error and record.labels == ["infrastructure_error"] and record.reward == 0.0
    assert reason in record.diagnoses[-1]["reason"]


def test_taus_grading_fails_a_conversation_cut_by_its_limits_and_skips_the_greeting():
    from seal_envs.sandbox import SandboxConfig
    from seal_envs.spec import load_domain
    from tool_specs.tau2_airline.splits import tasks

    task = next(t for t in tasks("all") if t.id == "airline_7")
    domain, config = load_domain("tau2_airline"), SandboxConfig(backend="inprocess")
    calls = [[[call] for turn in task.turns for call in turn.ground_truth] + [[]]]
    messages = [{"role": "assistant", "content": GREETING}, {"role": "user", "content": "Hi"},
                *({"role": "assistant", "content": "(a call)"} for _ in calls[0][:-1]),
                {"role": "assistant", "content": "The difference is 1628."}]
    assert tau2_verdict(task, calls, messages, domain, config, "user_stop")["reward"] == 1.0
    assert tau2_verdict(task, calls, messages, domain, config, "max_steps") == {
        "db": False, "communicate": False, "missing_info": [], "reward": 0.0, "premature": "max_steps"}


def test_seal_eval_names_the_user_in_its_report_and_masks_a_broken_user(tmp_path, capsys):
    from seal_envs.evaluation.cli import main

    server = Server("empty")
    try:
        status = main(["--domain", "tau2_airline", "--split", "eval", "--limit", "1", "--sandbox", "inprocess",
                       "--user", f"openai:{server.url}", "--out", str(tmp_path), "--transcripts", "0"])
    finally:
        server.close()
    results = json.loads((tmp_path / "results.json").read_text())
    assert status == 2  # an infrastructure error: the user simulator's, not the policy's
    assert results["run"]["user"].startswith(f"LLM user simulator (openai: {server.url} model tiny, temperature 0")
    assert results["run"]["benchmark"].endswith(f"user=openai:{server.url}")
    assert results["summary"]["user"] == results["run"]["user"] and results["config"]["user"] == f"openai:{server.url}"
    assert results["episodes"][0]["labels"] == ["infrastructure_error"]
    assert f"user: {results['run']['user']}" in capsys.readouterr().out
