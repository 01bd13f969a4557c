"""``ToolUseEnv``: a multi-turn tool-use task behind the Gymnasium API.

An episode is one task of several user turns. The action is the policy's assistant text; tool calls in it
are parsed, checked against the schema, executed in the task's sandbox, and their outputs come back as the
next observation. An answer without a tool call ends the user turn; the turn is verified against the
ground-truth replay and labelled; the next user turn follows. The reward is the verifier's 0/1 at the end.

Turn rules (the same in every mode, whatever the interface): a message with a malformed call block is answered
with a parse error and keeps the turn open under SEAL's own protocol, and ends the turn under BFCL's (as BFCL's
inference loop does); the error-hint cue of a training interface only adds a hint to such answers. A turn that
reaches ``max_steps_per_turn`` tool-calling steps is force-quit: the episode ends, fails unless that was its last
turn, and the turns never reached are labelled ``not_reached`` (``truncate`` does the same for a caller's budget). How actions are decoded, which functions a call can reach and how results are worded is the
env's ``Protocol`` (SEAL's own, or a benchmark's, e.g. BFCL's); SEAL's own decodes the env's ``tool_format``.

With an LLM user (``user="openai:..."`` or ``"hf:..."``, ``seal_envs.users``) a task is one conversation: the
first observation holds tau2's greeting and the user's first message, each text answer of the agent gets the
user's reply, and the episode ends when the user (or the agent) says a stop token or tau2's limits are reached
(``info["termination"]``); ``seal_envs.users.conversation`` says how it is judged.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from seal_envs.diagnosis import (
    CallRecord, Diagnosis, Label, TurnEvidence, TurnVerdict, diagnose_turn, fault, not_reached,
)
from seal_envs.interface import FailureInput, InterfaceState, evolve, render_error_hint, render_system_prompt
from seal_envs.formats import DEFAULT_TOOL_FORMAT, ParseLimits, ToolFormat, get_tool_format
from seal_envs.ground_truth import GroundTruthWarning, check_ground_truth, describe, schema_violations
from seal_envs.protocol import NATIVE, Protocol
from seal_envs.resolve import check_implementations
from seal_envs.sandbox import CallResult, Sandbox, SandboxConfig, SandboxError, get_pool
from seal_envs.spaces import ChatMessages, Message, UnicodeText
from seal_envs.spec.loader import ToolDomain, ToolSpec, check_module_names, load_domain
from seal_envs.task import TASK_FILE, Task, ToolCall, load_tasks
from seal_envs.users import GREETING, UserConfig, UserError, agent_stop, make_user
from seal_envs.users.conversation import Conversation, conversation_task
from seal_envs.verifier import REFERENCES, TurnReference, episode_classes, judge_turn

log = logging.getLogger(__name__)
Mode = Literal["train", "eval"]
RESET_ATTEMPTS = 3


def _as_domains(domain: str | Path | ToolDomain | Sequence[str | Path | ToolDomain]) -> tuple[ToolDomain, ...]:
    items = [domain] if isinstance(domain, (str, Path, ToolDomain)) else list(domain)
    return tuple(d if isinstance(d, ToolDomain) else load_domain(d) for d in items)


class ToolUseEnv(gym.Env[tuple[Message, ...], str]):
    """Multi-turn tool use with an executable verifier, per-turn diagnosis and an evolvable interface.

    Args:
        domain: a bundled domain name, a directory/file of a tool spec, a ``ToolDomain``, or several of these.
        tasks: tasks to sample from; default: the ``tasks.json`` next to the (first) domain's spec, or for a domain
            that declares ``task_splits`` and has none, its split named after ``mode`` ("train" or "eval").
        mode: ``"train"`` (the interface may be mutated) or ``"eval"`` (always the original interface).
        sandbox: where tools run; ``"docker"`` (default, isolated) or ``"inprocess"`` (debugging only).
        max_steps_per_turn: tool-calling steps per user turn; the step that reaches it force-quits the episode.
        system_prompt: base system prompt (a task's own prompt wins); None: no system message.
        interface: a starting interface state for training envs (e.g. loaded from a checkpoint).
        protocol: the benchmark's conversation rules (decoding, reachable functions, result wording).
        parse_limits: caps on the calls and call size one assistant message may carry.
        tool_format: how calls are written in the action (``seal_envs.formats``: "hermes", "mistral",
            "llama3_json", or a registered name); a protocol that decodes its benchmark's own format wins.
        user: who plays the user: ``"scripted"`` (the tasks' fixed turns), ``"openai:<base_url>"`` or
            ``"hf:<model folder>"`` (an LLM user simulator on tau2's protocol; tasks need a ``user_scenario``),
            or a ``UserConfig``.

    Raises ``UnresolvedImplementations`` (a ``ValueError``) when a tool's implementation names a module, class or
    method that does not exist (resolved inside a sandbox, see ``seal_envs.resolve``).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        domain: str | Path | ToolDomain | Sequence[str | Path | ToolDomain] = "shop",
        tasks: str | Path | Sequence[Task] | None = None,
        mode: Mode = "train",
        sandbox: SandboxConfig | Literal["docker", "inprocess"] = "docker",
        max_steps_per_turn: int = 20,
        system_prompt: str | None = None,
        interface: InterfaceState | None = None,
        render_mode: str | None = None,
        protocol: Protocol = NATIVE,
        parse_limits: ParseLimits = ParseLimits(),
        tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT,
        user: str | UserConfig = "scripted",
    ):
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', not {mode!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', not {render_mode!r}")
        self.domains = _as_domains(domain)
        check_module_names(self.domains)
        self.tools: dict[str, ToolSpec] = {}
        for d in self.domains:
            for tool in d.tools:
                if tool.name in self.tools:
                    raise ValueError(f"tool {tool.name!r} is defined by more than one domain")
                self.tools[tool.name] = tool
        if tasks is None and self.domains[0].task_splits and not (self.domains[0].root / TASK_FILE).exists():
            tasks = self.domains[0].split_tasks(mode)
        elif tasks is None:
            tasks = load_tasks(self.domains[0].root)
        elif isinstance(tasks, (str, Path)):
            tasks = load_tasks(tasks)
        self.user = UserConfig.parse(user)
        self.tasks: tuple[Task, ...] = tuple(conversation_task(t, self.user) if self.user.conversational else t
                                             for t in tasks)
        if not self.tasks:
            raise ValueError("no tasks given")
        try:
            self._user = make_user(self.user)
        except UserError as exc:
            raise ValueError(f"user {self.user.spec!r}: {exc}") from None
        names = {d.name for d in self.domains}
        strangers = sorted({t.domain for t in self.tasks} - names)
        if strangers:  # their ground truth would be checked against tools they were not written for
            raise ValueError(f"tasks of domain {', '.join(map(repr, strangers))} given to an env of domain "
                             f"{', '.join(map(repr, sorted(names)))}; check the tasks file's \"domain\" "
                             "(`seal-envs validate DOMAIN --tasks FILE` lists them)")
        self._tasks_by_id = {t.id: t for t in self.tasks}
        self._backends: dict[tuple[str, int], frozenset[str]] = {}
        self.mode: Mode = mode
        self.sandbox_config = SandboxConfig(backend=sandbox) if isinstance(sandbox, str) else sandbox
        self.max_steps_per_turn = max_steps_per_turn
        self.parse_limits = parse_limits
        self.system_prompt = system_prompt
        self.render_mode = render_mode
        self.protocol = protocol
        self.tool_format = get_tool_format(tool_format)
        if protocol.decodes is not None and protocol.decodes != self.tool_format.name:
            raise ValueError(f"the {protocol.name} protocol decodes calls in its benchmark's own {protocol.decodes!r} "
                             f"format (to score exactly as the benchmark does), not {self.tool_format.name!r}: use "
                             f"tool_format={protocol.decodes!r}")
        self.python_paths = tuple(str(p) for d in self.domains for p in d.python_paths)
        self._code = "+".join(d.code_hash() for d in self.domains)  # the tool code running now
        try:  # a typo in an implementation fails here, naming the file and tool, not at reset as a task_error
            check_implementations(self.domains, self.sandbox_config, self.python_paths, self._code)
        except (SandboxError, RuntimeError) as exc:  # no sandbox now: reset reports that as an infrastructure error
            log.warning("could not check the tool implementations in a sandbox: %s", exc)
        problems = check_ground_truth(self.tasks, self.tools, self._code)  # once per process and task set
        if problems:  # the replay would make a wrong answer the reference: say so loudly (BFCL's data has 5)
            warnings.warn(f"{describe(problems, 'domain ' + ', '.join(sorted(names)))}\nAn agent is scored against "
                          "these calls as they are; `seal-envs validate DOMAIN` lists every one.", GroundTruthWarning,
                          stacklevel=2)
        self._interface = InterfaceState() if mode == "eval" or interface is None else interface
        self.action_space = UnicodeText(max_length=1 << 16)
        self.observation_space = ChatMessages()
        self._sandbox: Sandbox | None = None
        self._task: Task | None = None
        self._done = True
        self.messages: list[Message] = []

    # ------------------------------------------------------------------ interface evolution

    @property
    def interface(self) -> InterfaceState:
        """The training-time interface state; applied from the next ``reset``."""
        return self._interface

    def mutate(self, diagnosis: FailureInput | InterfaceState) -> InterfaceState:
        """Evolve the interface from a failure profile or diagnoses (or adopt a saved ``InterfaceState``)."""
        if self.mode == "eval":
            raise RuntimeError("evaluation envs always run the original interface; mutate a mode='train' env instead")
        self._interface = diagnosis if isinstance(diagnosis, InterfaceState) else evolve(self._interface, diagnosis)
        return self._interface

    # ------------------------------------------------------------------ episode

    @property
    def task(self) -> Task | None:
        """The current episode's task as the env plays it (with an LLM user: one conversation turn)."""
        return self._task

    def _task_by_id(self, task_id: str) -> Task:
        if not isinstance(task_id, str):
            raise ValueError(f"task_id must be a string naming a task, not {type(task_id).__name__} {task_id!r:.100}")
        if task_id not in self._tasks_by_id:
            sample = ", ".join(list(self._tasks_by_id)[:5])
            raise ValueError(f"unknown task_id {task_id!r}; this env has {len(self.tasks)} tasks, e.g. {sample}")
        return self._tasks_by_id[task_id]

    def _pick_task(self, options: dict[str, Any] | None) -> Task:
        task_id = (options or {}).get("task_id")
        if task_id is None:
            return self.tasks[int(self.np_random.integers(len(self.tasks)))]
        return self._task_by_id(task_id)

    def _load_episode(self, task: Task) -> tuple[TurnReference, ...] | None:
        """Take a sandbox, compute (or reuse) the reference replay, load the initial state.

        Returns None and sets ``_task_error`` when the task itself cannot be executed, or
        ``_infrastructure_error`` when no sandbox can be had (the daemon is down): the first step then ends
        the episode with that label instead of ``reset`` raising inside a rollout.
        """
        for attempt in range(RESET_ATTEMPTS):
            try:
                if self._sandbox is None:
                    self._sandbox = get_pool(self.sandbox_config).acquire()
            except SandboxError as exc:  # no sandbox starts: retrying would only wait for the daemon again
                return self._no_sandbox(task, str(exc))
            try:
                with get_pool(self.sandbox_config).pristine() as pristine:  # never where agent code ran
                    reference = REFERENCES.get(task, pristine, self.tools, self.python_paths, self.protocol, self._code)
                self._sandbox.reset(episode_classes(task, self.tools), self.python_paths, self._code)
                return reference
            except SandboxError as exc:  # e.g. a warm sandbox that died with a restarted daemon: take another
                self._sandbox_failed()
                if attempt == RESET_ATTEMPTS - 1:
                    return self._no_sandbox(task, f"{RESET_ATTEMPTS} sandboxes failed: {exc}")
            except (ValueError, KeyError, TypeError) as exc:
                self._task_error = f"task {task.id!r} cannot be executed: {exc}"
                return None
        raise AssertionError("unreachable")

    def _no_sandbox(self, task: Task, reason: str) -> None:
        self._infrastructure_error = reason
        log.warning("episode of task %r masked as an infrastructure error: %s", task.id, reason)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task = self._pick_task(options)
        self._task, self._task_error, self._infrastructure_error = task, None, None
        self._reference = self._load_episode(task)
        self._episode_interface = self._interface
        self._available = list(task.tools if task.tools is not None else self.tools)
        self._turn, self._steps_in_turn = 0, 0
        self._diagnoses: list[Diagnosis] = []
        self._verdicts: list[TurnVerdict] = []
        self._executed: list[tuple[str, dict[str, Any]]] = []  # successful calls, to rebuild a lost sandbox
        self._outputs: list[str] = []  # every call's output this episode (the verifier accepts earlier ones)
        self._done = False
        self._conversation, self._termination = Conversation(self.user), None
        prompt = render_system_prompt(task.system_prompt or self.system_prompt, self._episode_interface)
        self.messages = [{"role": "system", "content": prompt}] if prompt else []
        if self._user is None:
            self.messages += self._start_turn(task.turns[0].user)
        elif self._task_error is None and self._infrastructure_error is None:
            self.messages.append({"role": "assistant", "content": GREETING})
            try:
                first = self._user.start(task.metadata["user_scenario"])
                self.messages += self._start_turn(first.text)
                self._termination = first.stop  # the user ended it at once: the first step judges the episode
            except UserError as exc:
                self._no_sandbox(task, f"the user simulator failed: {exc}")
        observation = tuple(self.messages)
        return observation, self._info(error=self._task_error or self._infrastructure_error)

    def _start_turn(self, user_message: str) -> list[Message]:
        turn = self._task.turns[self._turn]
        self._available += [n for n in turn.add_tools if n not in self._available]
        self._records: list[CallRecord] = []
        self._steps_in_turn = 0
        return [{"role": "user", "content": user_message}]

    def _converse(self, content: str, stepped: bool, errors: int) -> tuple[list[Message], str | None]:
        """An LLM user's side of one step: count it as tau2 does, and after a text answer get the user's reply.
        Returns the user's message (if any) and the termination, if the conversation ends here."""
        limit = self._conversation.add(2 if stepped else 1, errors)
        if stepped or limit or agent_stop(content):
            return [], limit or (None if stepped else "agent_stop")
        reply = self._user.reply(content)
        self._steps_in_turn = 0  # the step cap counts tool-calling steps per user message
        return [{"role": "user", "content": reply.text}], reply.stop or self._conversation.add(1)

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools offered right now, in the OpenAI ``tools=`` format (interface cues applied)."""
        return [self.protocol.tool_schema(self.tools[n], self._task, self._episode_interface)
                for n in self._available if n in self.tools]

    def _info(self, diagnosis: Diagnosis | None = None, error: str | None = None, **extra: Any) -> dict[str, Any]:
        """The info of a reset or step. Every key keeps one type in every info, and ``label``, ``diagnosis`` and
        ``error`` are absent rather than None, so Gymnasium's vector envs merge any mix of sub-env infos (a dict
        in one env and None in another breaks their merge; a bool array would swallow a reason string)."""
        info = {
            "task_id": self._task.id,
            "category": self._task.category,
            "turn": self._turn,
            "tools": self.tool_schemas,
            "labels": [d.label.value for d in self._diagnoses],
            "tags": [d.tag.value for d in self._diagnoses],
            "interface_version": self._episode_interface.version,
            "task_error": self._task_error is not None,
            "infrastructure_error": self._infrastructure_error is not None,
            **extra,
        }
        if diagnosis is not None:
            info["label"], info["tag"], info["diagnosis"] = diagnosis.label.value, diagnosis.tag.value, diagnosis.to_json()
        if error is not None:
            info["error"] = error
        return info

    def _execute(self, call: ToolCall, deadline: float) -> tuple[CallRecord, CallResult | None]:
        tool = self.protocol.resolve(call, self._task, self._available, self.tools)
        if isinstance(tool, str):
            return CallRecord(self._steps_in_turn, "unknown_tool", call, error=tool), None
        violations = schema_violations(tool, call.arguments, self.parse_limits.pattern_timeout_s)
        left = deadline - time.monotonic()
        if left <= 0:  # earlier calls of this step used its whole budget (SandboxConfig.step_timeout_s)
            result = CallResult(ok=False, error_type="StepTimeout", error="not run: this step's calls took over "
                                f"{self.sandbox_config.step_timeout_s:g} s")
        else:
            result = self._sandbox.call(tool.implementation, call.arguments, timeout_s=left)
        if not result.infrastructure and not self._sandbox.alive:
            result = self._recover_from_tool_death(result, deadline)
        if result.infrastructure:
            outcome = "infrastructure_error"
        elif not result.ok:
            outcome = "invalid_arguments" if violations else "execution_error"
        else:
            outcome = "ok"
            self._executed.append((tool.implementation, call.arguments))
        record = CallRecord(self._steps_in_turn, outcome, call, tool.mutates_state, violations,
                            None if result.ok else f"{result.error_type}: {result.error}", result.output,
                            backend=tool.class_path)
        return record, result

    def _recover_from_tool_death(self, result: CallResult, deadline: float) -> CallResult:
        """A tool hung, crashed or exhausted its limits and took its sandbox down: that is the tool's (or the
        agent's) failure, not ours. Rebuild the episode's state in a fresh sandbox by replaying the calls that
        succeeded so far (tools are deterministic), within the step's deadline, and report the call as failed
        (a replay the deadline cut short leaves a state that fails the turn: still the tool's doing)."""
        self._sandbox_failed()
        try:
            self._sandbox = get_pool(self.sandbox_config).acquire()
            self._sandbox.reset(episode_classes(self._task, self.tools), self.python_paths, self._code)
            for target, arguments in self._executed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if self._sandbox.call(target, arguments, timeout_s=left).infrastructure:
                    raise SandboxError("replay into the replacement sandbox failed")
        except (SandboxError, ValueError) as exc:
            return CallResult(ok=False, error_type="SandboxLost", error=str(exc), infrastructure=True)
        return result

    def _tool_message(self, record: CallRecord, content: str, name: str) -> Message:
        hint = render_error_hint(record, self._available, self._episode_interface, self.tool_format.example)
        return {"role": "tool", "name": name, "content": f"{content}\n\n{hint}" if hint else content}

    def step(self, action: str):
        if self._done:
            raise RuntimeError("the episode is over; call reset() first")
        if self._task_error is not None:
            return self._finish_with(Label.TASK_ERROR, self._task_error)
        if self._infrastructure_error is not None:
            return self._finish_with(Label.INFRASTRUCTURE_ERROR, self._infrastructure_error)
        if self._termination is not None:  # the user's first message ended the conversation: nothing to play
            return self._finish_conversation()
        parsed = self.protocol.decode(action, self.parse_limits, self.tool_format)
        acted_turn = self._turn  # info["turn"] is the turn this action belongs to, even when it ends it
        self.messages.append({"role": "assistant", "content": action if isinstance(action, str) else str(action)})
        self._steps_in_turn += 1
        first_record = len(self._records)
        observation: list[Message] = []
        # the protocol, never the interface, decides whether a malformed call is answered (the hint is extra text)
        recovering = bool(parsed.errors) and self.protocol.answers_malformed_calls
        for error in parsed.errors:
            record = CallRecord(self._steps_in_turn, "parse_error", error=error.reason)
            self._records.append(record)
            if recovering:
                content = json.dumps({"error": f"ParseError: {error.reason}"})
                observation.append(self._tool_message(record, content, "parse_error"))
        deadline = time.monotonic() + self.sandbox_config.step_timeout_s
        for call in parsed.calls:
            record, result = self._execute(call, deadline)
            self._records.append(record)
            if record.outcome == "infrastructure_error":
                self._sandbox_failed()
                return self._finish_with(Label.INFRASTRUCTURE_ERROR, record.error or "sandbox failure")
            if result is not None:
                self._outputs.append(self.protocol.output(result))
                content = self.protocol.render(result)
            else:
                content = self.protocol.render_error(record.error or "")
                self._outputs.append(content)
            observation.append(self._tool_message(record, content, call.name))
        stepped = bool(parsed.calls) or recovering
        cap_hit = stepped and self._steps_in_turn >= self.max_steps_per_turn
        turn_ended = not stepped or cap_hit
        if self._user is not None and cap_hit:
            self._termination = "step_cap"
        elif self._user is not None:
            failed = sum(r.outcome in ("unknown_tool", "invalid_arguments", "execution_error")
                         for r in self._records[first_record:])
            try:
                said, self._termination = self._converse(parsed.content, stepped, failed)
            except UserError as exc:
                return self._finish_with(Label.INFRASTRUCTURE_ERROR, f"the user simulator failed: {exc}")
            observation += said
            turn_ended = self._termination is not None
        diagnosis = None
        terminated = False
        reward = 0.0
        if turn_ended:
            try:
                diagnosis = self._end_turn("" if stepped else parsed.content, cap_hit)
            except SandboxError as exc:
                self._sandbox_failed()
                return self._finish_with(Label.INFRASTRUCTURE_ERROR, str(exc))
            self._turn += 1
            if self._turn < len(self._task.turns) and not cap_hit:
                observation += self._start_turn(self._task.turns[self._turn].user)
            else:  # the last turn is over, or a force-quit: BFCL fails an entry force-quit before its last turn
                terminated, self._done = True, True
                finished = self._turn == len(self._task.turns)
                self._pad_unreached("a step cap ended the episode in an earlier turn")
                reward = float(finished and all(v.passed for v in self._verdicts))
        self.messages.extend(observation)
        info = self._info(diagnosis, turn_ended=turn_ended, calls=list(parsed.calls), force_quit=cap_hit)
        info["turn"] = acted_turn
        if terminated:
            info["verdicts"] = [v.passed for v in self._verdicts]
            if self._termination is not None:
                info["termination"] = self._termination
        return tuple(observation), reward, terminated, False, info

    def _finish_conversation(self):
        """Judge a conversation the user ended before the agent acted (its action is not played)."""
        try:
            diagnosis = self._end_turn("", cap_hit=False)
        except SandboxError as exc:
            self._sandbox_failed()
            return self._finish_with(Label.INFRASTRUCTURE_ERROR, str(exc))
        self._turn, self._done = self._turn + 1, True
        info = self._info(diagnosis, turn_ended=True, calls=[], force_quit=False, termination=self._termination,
                          verdicts=[v.passed for v in self._verdicts])
        return (), float(all(v.passed for v in self._verdicts)), True, False, info

    def truncate(self, reason: str = "the caller ended the episode") -> dict[str, Any]:
        """End the episode from outside (a trainer's response budget or turn cap), as the reference pads it.

        The turn in progress is judged and diagnosed from what happened in it so far, and every later turn is
        labelled ``not_reached``, so that the diagnoses (and a trajectory weight) cover the whole task. Returns the
        final ``info`` (reward 0: the task was not finished). A finished episode is left as it is."""
        if self._done:
            return self._info()
        if self._task_error is None and self._infrastructure_error is None and self._turn < len(self._task.turns):
            try:
                self._end_turn("", cap_hit=True)
                self._turn += 1
            except SandboxError as exc:
                self._sandbox_failed()
                return self._finish_with(Label.INFRASTRUCTURE_ERROR, str(exc))[-1]
            self._pad_unreached(reason)
        self._done = True
        return self._info(truncated=True, verdicts=[v.passed for v in self._verdicts])

    def _pad_unreached(self, reason: str) -> None:
        for index in range(self._turn, len(self._task.turns)):
            self._diagnoses.append(not_reached(index, self._task.turns[index], reason))

    def _ground_truth_backends(self, turn_index: int) -> frozenset[str]:
        """The backend classes the turn's ground-truth calls run on (the instance check's reference; cached)."""
        key = (self._task.id, turn_index)
        if key not in self._backends:
            tools = [self.protocol.resolve(call, self._task, list(self.tools), self.tools)
                     for call in self._task.turns[turn_index].ground_truth]
            self._backends[key] = frozenset(t.class_path for t in tools if isinstance(t, ToolSpec))
        return self._backends[key]

    def _end_turn(self, final_response: str, cap_hit: bool) -> Diagnosis:
        turn = self._task.turns[self._turn]
        calls_made = sum(r.call is not None for r in self._records)
        verdict = judge_turn(self._reference[self._turn], turn, self._sandbox.snapshot(), self._outputs,
                             final_response, calls_made)
        evidence = TurnEvidence(self._turn, turn, tuple(self._records), final_response, verdict, cap_hit,
                                self._ground_truth_backends(self._turn))
        diagnosis = diagnose_turn(evidence)
        self._verdicts.append(verdict)
        self._diagnoses.append(diagnosis)
        return diagnosis

    def _sandbox_failed(self) -> None:
        if self._sandbox is not None:
            get_pool(self.sandbox_config).discard(self._sandbox)
            self._sandbox = None

    def _finish_with(self, label: Label, reason: str):
        """End the episode on a fault that is not the agent's: reward 0, flagged so trainers mask it."""
        diagnosis = fault(self._turn, label, reason)
        self._diagnoses.append(diagnosis)
        self._done = True
        if label is Label.TASK_ERROR:
            self._task_error = reason
        else:
            self._infrastructure_error = reason
        info = self._info(diagnosis, reason, turn_ended=True, calls=[], force_quit=False)
        return (), 0.0, True, False, info

    @property
    def diagnoses(self) -> tuple[Diagnosis, ...]:
        """The current episode's turn diagnoses so far."""
        return tuple(self._diagnoses)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self.messages)

    def close(self) -> None:
        if self._sandbox is not None:
            get_pool(self.sandbox_config).release(self._sandbox)
            self._sandbox = None
        super().close()
