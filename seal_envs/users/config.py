"""Who plays the user of an episode: ``UserConfig`` and its one-string form for ``gym.make(..., user=)`` and
``seal-eval --user``.

- ``scripted``: the task's fixed user turns (on tau2 airline the offline scripted user, which is not tau2's
  protocol);
- ``openai:<base_url>``: an LLM user simulator behind any OpenAI-compatible ``/chat/completions`` endpoint;
- ``hf:<model folder>``: an LLM user simulator on a local Hugging Face model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

UserKind = Literal["scripted", "openai", "hf"]
KINDS: tuple[str, ...] = get_args(UserKind)
SCRIPTED_TAU2 = ("offline scripted user (first message from the task's scenario, fixed replies after; not tau2's "
                 "user-simulator protocol)")


@dataclass(frozen=True)
class UserConfig:
    """The user of every episode of an env. The LLM users follow tau2's user-simulator protocol
    (``seal_envs.users.simulator``); their limits keep a misbehaving model or endpoint from hanging a run."""

    kind: UserKind = "scripted"
    target: str = ""  # openai: the endpoint's base URL (…/v1); hf: the model folder
    model: str | None = None  # openai: the served model's name; None: the endpoint's only model (GET /models)
    api_key_env: str = "OPENAI_API_KEY"  # openai: the environment variable holding the key, if any
    temperature: float = 0.0  # tau2's default user temperature
    max_tokens: int = 512  # per user message
    timeout_s: float = 120.0  # per user message (the whole HTTP exchange)
    max_reply_chars: int = 8000  # a longer user message is cut there
    max_steps: int = 200  # tau2's max_steps (its CLI default): messages exchanged before the episode is cut
    max_errors: int = 10  # tau2's max_errors: failed tool calls before the episode is cut
    seed: int = 0  # hf with temperature > 0: the sampling seed

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"user kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind != "scripted" and not self.target:
            where = "the endpoint's base URL, e.g. openai:http://localhost:8000/v1" if self.kind == "openai" else \
                "a local Hugging Face model folder, e.g. hf:/path/to/model"
            raise ValueError(f"user {self.kind!r} needs {where}")
        if min(self.max_tokens, self.max_reply_chars, self.max_steps, self.max_errors) < 1 or self.timeout_s <= 0:
            raise ValueError("user limits (max_tokens, max_reply_chars, max_steps, max_errors, timeout_s) must be "
                             "positive")

    @classmethod
    def parse(cls, spec: str | UserConfig, **options) -> UserConfig:
        """``"scripted"``, ``"openai:<base_url>"`` or ``"hf:<model folder>"`` (a ``UserConfig`` passes through);
        ``options`` set the other fields (e.g. ``model=``)."""
        if isinstance(spec, UserConfig):
            return replace(spec, **options) if options else spec
        if not isinstance(spec, str):
            raise ValueError(f"user must be a string or a UserConfig, not {type(spec).__name__}")
        kind, _, target = spec.partition(":")
        if kind not in KINDS or (kind == "scripted") != (not target):
            raise ValueError(f"user {spec!r}: write scripted, openai:<base_url> or hf:<model folder>")
        return cls(kind=kind, target=target, **options)

    @property
    def spec(self) -> str:
        """The one-string form (``parse`` reads it back, less the other fields)."""
        return self.kind if self.kind == "scripted" else f"{self.kind}:{self.target}"

    @property
    def conversational(self) -> bool:
        """An LLM plays the user: the episode is one conversation, not the task's fixed turns."""
        return self.kind != "scripted"

    def describe(self, tau2: bool = False) -> str:
        """The user mode as every report names it (``tau2``: the run plays tau2 tasks)."""
        if self.kind == "scripted":
            return SCRIPTED_TAU2 if tau2 else "scripted (the tasks' fixed user turns)"
        who = f"{self.target} model {self.model}" if self.kind == "openai" and self.model else self.target
        return f"LLM user simulator ({self.kind}: {who}, temperature {self.temperature:g}), tau2's user protocol"
