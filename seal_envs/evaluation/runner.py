"""Run policy episodes through ``ToolUseEnv`` (one after another or on worker threads) and keep what the report,
the official checker and a reader of the transcripts need."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from tqdm import tqdm

from seal_envs.evaluation.fingerprint import RequestLog
from seal_envs.evaluation.policies import Policy
from seal_envs.spaces import Message
from seal_envs.task import Task, ToolCall


@dataclass
class EpisodeRecord:
    """One task's outcome. ``passed`` is the BFCL score, which is the env's reward (a force-quit before the last
    turn already fails it); ``calls`` are the calls the env decoded, per played turn and step."""

    task_id: str
    category: str
    reward: float
    labels: list[str]
    sample: int = 0  # which of the task's k samples (seal-eval --samples)
    step_cap_hit: bool = False
    infrastructure_error: bool = False
    task_error: str | None = None
    calls: list[list[list[ToolCall]]] = field(default_factory=list)
    diagnoses: list[dict[str, Any]] = field(default_factory=list)
    official_valid: bool | None = None
    official_checker: str | None = None  # whose check official_valid is: "bfcl" or "tau2"
    termination: str | None = None  # with an LLM user: why the conversation ended (seal_envs.users.conversation)
    requests_sha256: str = ""  # hash of every request the policy was sent (``seal_envs.evaluation.fingerprint``)
    messages: list[Message] = field(default_factory=list)  # the transcript: every message, the policy's included

    @property
    def passed(self) -> bool:
        return self.reward == 1.0

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["calls"] = [[[c.to_json() for c in step] for step in turn] for turn in self.calls]
        doc["passed"] = self.passed
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EpisodeRecord:
        """A record written by ``to_json`` (``seal-eval --resume`` reads them back)."""
        known = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        known["calls"] = [[[ToolCall(c["name"], c["arguments"]) for c in step] for step in turn]
                          for turn in doc.get("calls", [])]
        return cls(**known)


def run_episode(env, policy: Policy, task: Task) -> EpisodeRecord:
    """Play ``task`` to the end with ``policy``; the env's faults end the episode and are recorded, not raised."""
    observation, info = env.reset(options={"task_id": task.id})
    policy.start(env.get_wrapper_attr("task"))  # as the env plays it (an LLM user makes it one conversation)
    messages = list(observation)
    record = EpisodeRecord(task.id, task.category, 0.0, [], calls=[[]],
                           task_error=info.get("error") if info["task_error"] else None)
    requests = RequestLog()
    turn = 0
    while True:
        requests.add(messages, info["tools"])
        action = policy.act(messages, info["tools"], turn)
        messages.append({"role": "assistant", "content": action})
        observation, reward, terminated, truncated, info = env.step(action)
        messages.extend(observation)
        record.calls[turn].append(list(info.get("calls", ())))
        if info.get("diagnosis"):
            record.diagnoses.append(info["diagnosis"])
            record.step_cap_hit |= bool(info["diagnosis"]["evidence"].get("step_cap_hit"))
        if terminated or truncated:
            break
        if info["turn_ended"]:
            turn += 1
            record.calls.append([])
    record.reward = float(reward)
    record.labels = list(info["labels"])
    record.infrastructure_error = bool(info.get("infrastructure_error"))
    record.termination = info.get("termination")
    record.requests_sha256 = requests.hexdigest()
    record.messages = messages
    return record


def stratified(tasks: Sequence[Task], limit: int | None) -> tuple[Task, ...]:
    """At most ``limit`` tasks with every category in proportion to its size (largest remainders; each category
    gets one when the limit allows), the first of each category in task order: deterministic, and a short run
    still sees every category."""
    if limit is None or limit >= len(tasks):
        return tuple(tasks)
    by_category: dict[str, list[Task]] = {}
    for task in tasks:
        by_category.setdefault(task.category, []).append(task)
    quota = {c: limit * len(ts) // len(tasks) for c, ts in by_category.items()}
    if limit >= len(by_category):
        quota = {c: max(q, 1) for c, q in quota.items()}
    by_remainder = sorted(by_category, key=lambda c: -(limit * len(by_category[c]) % len(tasks)))
    for category in by_remainder:
        if sum(quota.values()) >= limit:
            break
        quota[category] += 1
    while sum(quota.values()) > limit:  # the minimum of one overshot: take back from the largest quotas
        quota[max(quota, key=quota.get)] -= 1
    chosen = {id(t) for c, ts in by_category.items() for t in ts[: quota[c]]}
    return tuple(t for t in tasks if id(t) in chosen)


def run_episodes(tasks: Sequence[Task], make_env: Callable[[], Any], make_policy: Callable[[], Policy],
                 workers: int = 1, progress: bool = True,
                 on_finish: Callable[[int, EpisodeRecord], None] | None = None) -> list[EpisodeRecord | None]:
    """Every task's record, in task order (a task may appear more than once: one episode each). ``workers``
    threads each own one env (so one sandbox) and one policy from ``make_policy`` and play episodes concurrently:
    tools run in sandboxes, and a verdict depends only on its own episode, so the records equal a run with one
    worker. ``on_finish(index, record)`` runs as each episode ends, one at a time (e.g. to write it at once, so
    an interrupted run keeps what finished); the progress bar shows the success rate so far."""
    records: list[EpisodeRecord | None] = [None] * len(tasks)
    pending = iter(range(len(tasks)))
    lock = threading.Lock()
    stop = threading.Event()
    bar = tqdm(total=len(tasks), desc="seal-eval", unit="episode", disable=not progress, dynamic_ncols=True)
    passed = finished = 0

    def work() -> None:
        nonlocal passed, finished
        env, policy = make_env(), make_policy()
        try:
            while not stop.is_set():
                with lock:
                    index = next(pending, None)
                if index is None:
                    return
                record = run_episode(env, policy, tasks[index])
                with lock:
                    records[index] = record
                    if on_finish is not None:
                        on_finish(index, record)
                    passed, finished = passed + record.passed, finished + 1
                    bar.update()
                    bar.set_postfix_str(f"success {100 * passed / finished:.1f}%")
        finally:
            env.close()

    count = max(1, min(workers, len(tasks)))
    try:
        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="seal-eval") as pool:
            futures = [pool.submit(work) for _ in range(count)]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # Ctrl-C or a failing policy: no new episodes; those in flight finish
                stop.set()
                raise
    finally:
        bar.close()
    return records
