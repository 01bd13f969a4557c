"""``seal-envs validate DOMAIN``: prove a domain's ground truth before anyone trains on it.

A broken ground truth looks valid to the env: the reference is whatever the ground truth did, so a call that
raises, an argument outside the tool's own enum or a missing required argument still give the replay reward
1.0. Validation resolves every implementation inside a sandbox (``seal_envs.resolve``), checks every
ground-truth call against the tool's JSON Schema, replays every task in a sandbox and reports calls that raise,
required responses that no replayed output holds and tasks filed under another domain, each with file, task id,
turn and JSON path.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tqdm import tqdm

from seal_envs.ground_truth import call_text, ground_truth_problems
from seal_envs.resolve import implementation_problems, resolve_targets
from seal_envs.sandbox import SandboxConfig, SandboxError, get_pool
from seal_envs.spec.loader import DOMAIN_FILE, ToolDomain, load_domain, resolve_file
from seal_envs.task import TASK_FILE, Task, load_tasks
from seal_envs.verifier import episode_classes, replay_turns


@dataclass(frozen=True)
class Problem:
    """One thing to fix, located as precisely as it is known."""

    file: str
    message: str
    task_id: str | None = None
    turn: int | None = None
    json_path: str | None = None

    def __str__(self) -> str:
        where = [f"task {self.task_id!r}"] if self.task_id is not None else []
        where += [f"turn {self.turn}"] if self.turn is not None else []
        where += [f"at {self.json_path}"] if self.json_path else []
        return f"{self.file}: {', '.join(where)}: {self.message}" if where else f"{self.file}: {self.message}"


@dataclass(frozen=True)
class ValidationConfig:
    sandbox: Literal["inprocess", "docker"] = "docker"  # tool code is untrusted; inprocess for your own code
    tasks: str | None = None  # a tasks.json to check against the domain; default: the domain's own
    split: str | None = None  # check the domain's declared ``task_splits`` split instead of a tasks.json


@dataclass(frozen=True)
class ValidationReport:
    domain: str
    tasks: int
    calls: int
    problems: tuple[Problem, ...]
    seconds: float
    sandbox: str

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        verdict = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        return (f"{self.domain}: {self.tasks} tasks, {self.calls} ground-truth calls replayed ({self.sandbox} "
                f"sandbox, {self.seconds:.1f} s): {verdict}")


class _Checker:
    """Collects the problems of one domain and its tasks."""

    def __init__(self, domain: ToolDomain, tasks: Sequence[Task], tasks_file: Path, config: SandboxConfig):
        self.domain, self.tasks, self.tasks_file, self.config = domain, tasks, str(tasks_file), config
        self.tools = {t.name: t for t in domain.tools}
        self.python_paths = tuple(str(p) for p in domain.python_paths)
        self.code = domain.code_hash()
        self.problems: list[Problem] = []
        self.calls = 0

    def add(self, message: str, task: Task | None = None, turn: int | None = None, path: str | None = None,
            file: str | None = None) -> None:
        self.problems.append(Problem(file or self.tasks_file, message, task.id if task else None, turn, path))

    def check_domains(self) -> None:
        other = sorted({t.domain for t in self.tasks} - {self.domain.name})
        if other:
            count = sum(t.domain != self.domain.name for t in self.tasks)
            self.add(f"{count} task(s) belong to domain {', '.join(map(repr, other))}, but "
                     f"{self.domain.root / DOMAIN_FILE} defines domain {self.domain.name!r}")

    def check_implementations(self) -> set[str]:
        """Report tool implementations and initial-state classes that do not resolve; returns every unresolved
        implementation and class path (their failures in the replay are consequences, not new problems)."""
        for error in implementation_problems([self.domain], self.config, self.python_paths, self.code):
            self.problems.append(Problem(error.file, error.problem, json_path=error.json_path))
        methods = resolve_targets([t.implementation for t in self.domain.tools], self.python_paths, self.code,
                                  self.config)  # cached: the same request as above
        classes = resolve_targets(sorted({path for task in self.tasks for path in task.initial_state}
                                         | {t.class_path for t in self.domain.tools}),
                                  self.python_paths, self.code, self.config)
        for index, task in enumerate(self.tasks):
            for path in task.initial_state:
                if path in classes:
                    self.add(f"initial state class {path!r}: {classes[path]}", task,
                             path=f"$.tasks[{index}].initial_state")
        return set(methods) | set(classes)

    def check_calls(self, index: int, task: Task) -> bool:
        """Schema and availability of every ground-truth call; False when a call names no tool of the domain."""
        problems = ground_truth_problems(task, index, self.tools)
        for problem in problems:
            message = problem.message.replace("of the domain", f"of domain {self.domain.name!r}")
            self.add(message, task, problem.turn, problem.json_path)
        return not any(p.unknown_tool for p in problems)

    def replay(self, index: int, task: Task, unresolved: set[str]) -> None:
        """Run the ground truth in a sandbox: calls that raise, required responses no output holds."""
        pool = get_pool(self.config)
        sandbox = pool.acquire()
        outputs: list[str] = []
        try:
            for t, (turn, (results, _)) in enumerate(zip(task.turns, replay_turns(
                    task, sandbox, self.tools, self.python_paths, self.code))):
                self.calls += len(results)
                for j, (call, result) in enumerate(zip(turn.ground_truth, results)):
                    outputs.append(result.render().lower())
                    if not result.ok and self.tools[call.name].implementation not in unresolved:
                        self.add(f"ground-truth call {call_text(call)} raises {result.error_type}: {result.error}",
                                 task, t, f"$.tasks[{index}].turns[{t}].ground_truth[{j}]")
                for required in turn.required_response:
                    if not any(required.lower() in output for output in outputs):
                        self.add(f"required response {required!r} is in no ground-truth output up to this turn, "
                                 "so no agent can know it", task, t, f"$.tasks[{index}].turns[{t}].required_response")
        except ValueError as exc:  # the initial state does not load
            if not unresolved & set(episode_classes(task, self.tools)):
                self.add(str(exc), task, path=f"$.tasks[{index}].initial_state")
        except SandboxError:
            pool.discard(sandbox)
            raise
        pool.release(sandbox)


def validate_domain(domain: str | Path, config: ValidationConfig = ValidationConfig(),
                    progress: bool = False) -> ValidationReport:
    """Check ``domain`` (a bundled name or a folder) and its tasks; problems are collected, not raised.
    Raises ``SpecError`` when the files themselves do not load, ``SandboxError`` when no sandbox runs."""
    start = time.monotonic()
    loaded = load_domain(domain)
    if config.split is not None:
        module = str(loaded.task_splits).split(":")[0]
        tasks = loaded.split_tasks(config.split)
        tasks_file = Path(f"{(loaded.root / Path(*module.split('.'))).with_suffix('.py')} (split {config.split!r})")
    else:
        tasks_file = resolve_file(config.tasks or loaded.root, TASK_FILE)
        if not tasks_file.exists() and loaded.task_splits:
            raise ValueError(f"domain {loaded.name!r} has no {tasks_file}; its tasks come from task_splits "
                             f"{loaded.task_splits!r}: pass a split (--split train or --split eval)")
        tasks = load_tasks(tasks_file)
    checker = _Checker(loaded, tasks, tasks_file, SandboxConfig(backend=config.sandbox))
    checker.check_domains()
    unresolved = checker.check_implementations()
    for index, task in enumerate(tqdm(tasks, desc=f"validate {loaded.name}", unit="task", disable=not progress)):
        if checker.check_calls(index, task):
            checker.replay(index, task, unresolved)
    return ValidationReport(loaded.name, len(tasks), checker.calls, tuple(checker.problems),
                            time.monotonic() - start, config.sandbox)
