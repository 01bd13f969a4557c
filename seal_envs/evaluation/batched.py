"""Play many ``ToolUseEnv`` episodes at once with one Hugging Face model, in one continuous batch.

Every live episode's next message is a row of the generator's running batch (``BatchGenerator.admit``/``step``):
when a message ends, its env is stepped at once and the episode's next prompt (its chat template with
``tools=info["tools"]``) joins the batch, so no episode waits for the longest message of the others; a finished
episode's env takes the next queued episode, so the batch stays full. The budgets are the trainer's agent loop's
(``seal_trainer.agent_loop``): a response budget of tokens after the first prompt (``rollout.response_length``)
and a cap on assistant messages (``seal.max_assistant_turns``); an episode that exhausts either, or a message
that stops at its token cap, ends truncated with reward 0, as it does in training.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from seal_envs.env import ToolUseEnv
from seal_envs.evaluation.batch_generate import BatchGenerator, Sampling, row_seed
from seal_envs.tool_template import chat_prompt_ids


@dataclass(frozen=True)
class Job:
    """One episode to play: a task, and which of its samples this is (for GRPO groups and records)."""

    task_id: str
    sample: int = 0


@dataclass(frozen=True)
class Limits:
    """Per-episode budgets, as in training; ``max_new_tokens`` optionally caps each message below the budget.

    ``end_on_cap``: a message cut at its token cap ends the episode (training); False sends it to the env as is.
    """

    response_budget: int = 1024
    max_assistant_turns: int = 8
    max_new_tokens: int | None = None
    end_on_cap: bool = True


@dataclass
class Outcome:
    """What one episode produced: the env's reward, turn labels and tags, and the actions that led there."""

    task_id: str
    sample: int
    reward: float = 0.0
    labels: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    truncated: bool = False
    infrastructure_error: bool = False
    task_error: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Live:
    job: Job
    env: ToolUseEnv
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    first_prompt: int = 0
    outcome: Outcome | None = None


def play_episodes(make_env: Callable[[], ToolUseEnv], jobs: Sequence[Job], tokenizer, generator: BatchGenerator,
                  sampling: Sampling = Sampling(), batch_size: int = 16, limits: Limits = Limits(),
                  progress: Any = None) -> list[Outcome]:
    """Play ``jobs`` with at most ``batch_size`` episodes at once; outcomes come back in ``jobs`` order.

    ``make_env`` builds an env (its interface decides the arm); envs are reused across episodes and closed at
    the end. ``progress``: an object with ``update(n)`` (e.g. tqdm), advanced per finished episode. A message's
    tokens depend only on its prompt and its seed (``row_seed(sampling.seed, job index, message index)``), not on
    what shares its batch.
    """
    queue = deque(enumerate(jobs))
    outcomes: list[Outcome | None] = [None] * len(jobs)
    idle: list[ToolUseEnv] = []
    envs: list[ToolUseEnv] = []
    ended: list[tuple[int, _Live, Any]] = []  # messages the last decode step finished
    live = 0

    def finish(index: int, episode: _Live) -> None:
        nonlocal live
        live -= 1
        outcomes[index] = episode.outcome
        idle.append(episode.env)
        if progress is not None:
            progress.update(1)

    def next_message(index: int, episode: _Live) -> None:
        ids = chat_prompt_ids(tokenizer, episode.messages, episode.tools)
        budget = limits.response_budget - (len(ids) - episode.first_prompt)
        if budget <= 0 or len(episode.outcome.actions) >= limits.max_assistant_turns:
            _truncate(episode)
            finish(index, episode)
            return
        seed = row_seed(sampling.seed, index, len(episode.outcome.actions))
        generator.admit(ids, min(budget, limits.max_new_tokens or budget), sampling, seed,
                        lambda generation: ended.append((index, episode, generation)))

    try:
        while queue or live:
            while queue and live < batch_size:
                index, job = queue.popleft()
                if not idle:
                    envs.append(make_env())
                    idle.append(envs[-1])
                episode = _start(idle.pop(), job, tokenizer)
                live += 1
                if episode.outcome.task_error or episode.outcome.infrastructure_error:
                    finish(index, episode)
                else:
                    next_message(index, episode)
            generator.step()
            for index, episode, generation in ended:
                if isinstance(generation, BaseException):
                    raise generation
                text = tokenizer.decode(generation.tokens, skip_special_tokens=True)
                if _step(episode, text, generation.finished or not limits.end_on_cap):
                    finish(index, episode)
                else:
                    next_message(index, episode)
            ended.clear()
    except BaseException as exc:
        generator.abort(exc)
        raise
    finally:
        for env in envs:
            env.close()
    return [o for o in outcomes if o is not None]


def _start(env: ToolUseEnv, job: Job, tokenizer) -> _Live:
    observation, info = env.reset(options={"task_id": job.task_id})
    episode = _Live(job, env, [dict(m) for m in observation], list(info["tools"]),
                    outcome=Outcome(job.task_id, job.sample))
    if info.get("task_error") or info.get("infrastructure_error"):
        _step(episode, "", True)  # the env ends such an episode at its first step, with the fault's label
    else:
        episode.first_prompt = len(chat_prompt_ids(tokenizer, episode.messages, episode.tools))
    return episode


def _step(episode: _Live, text: str, finished: bool) -> bool:
    """Step the env with ``text``; True when the episode is over."""
    outcome = episode.outcome
    outcome.actions.append(text)
    observation, reward, terminated, truncated, info = episode.env.step(text)
    outcome.labels, outcome.tags = list(info.get("labels", outcome.labels)), list(info.get("tags", outcome.tags))
    if info.get("infrastructure_error") or info.get("task_error"):
        outcome.infrastructure_error = bool(info.get("infrastructure_error"))
        outcome.task_error = bool(info.get("task_error"))
        return True
    if terminated or truncated:
        outcome.reward, outcome.truncated = float(reward), bool(truncated and not terminated)
        return True
    if not finished:  # the message hit its token cap: training ends the episode here
        _truncate(episode)
        return True
    episode.messages += [{"role": "assistant", "content": text}, *[dict(m) for m in observation]]
    episode.tools = list(info.get("tools", episode.tools))
    return False


def _truncate(episode: _Live) -> None:
    """End a live episode as training does: the env judges the turn in progress and pads the rest."""
    info = episode.env.truncate("the response budget or message cap ran out")
    episode.outcome.truncated = True
    episode.outcome.labels, episode.outcome.tags = list(info["labels"]), list(info["tags"])


__all__ = ["Job", "Limits", "Outcome", "play_episodes"]
