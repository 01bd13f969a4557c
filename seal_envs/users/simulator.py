"""An LLM user simulator that follows tau2-bench's user-simulator protocol.

- System prompt: tau2's simulation guidelines (``tau2_simulation_guidelines.md``, tau2's MIT text kept verbatim,
  see ``THIRD_PARTY_NOTICES.md``), then the task's ``user_scenario`` inside ``<scenario>`` tags, rendered as tau2
  renders it (an optional persona, then the instructions: domain, reason for call, known and unknown info, task
  instructions, each indented by a tab).
- The conversation opens with tau2's first agent message, "Hi! How can I help you today?"; the user answers it.
- The user sees only the agent's text messages (never its tool calls or their results), with the roles
  flipped: the agent speaks as ``user``, the simulator's own messages are ``assistant``.
- A user message holding ``###STOP###``, ``###TRANSFER###`` or ``###OUT-OF-SCOPE###`` ends the conversation
  (tau2's user stop); an agent message holding ``###STOP###`` ends it too (tau2's agent stop).

The model's output is untrusted: a failing or hanging backend raises ``UserError`` within the config's
timeout, an empty message is a ``UserError`` (tau2's user error), and a long one is cut at
``max_reply_chars``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from seal_envs.spaces import Message
from seal_envs.users.config import UserConfig

GREETING = "Hi! How can I help you today?"  # tau2's first agent message
USER_STOP_TOKENS = {"###STOP###": "user_stop", "###TRANSFER###": "transfer", "###OUT-OF-SCOPE###": "out_of_scope"}
AGENT_STOP_TOKEN = "###STOP###"
SCENARIO_FIELDS = (("domain", "Domain: "), ("reason_for_call", "Reason for call:\n"), ("known_info", "Known info:\n"),
                   ("unknown_info", "Unknown info:\n"), ("task_instructions", "Task instructions:\n"))

Chat = Callable[[Sequence[Message]], str]  # the user's conversation (system first) -> its next message


class UserError(Exception):
    """The user simulator gave no usable message: its backend failed or timed out, or it wrote nothing.
    Not the agent's mistake: the env ends the episode as an infrastructure error."""


@cache
def guidelines() -> str:
    """tau2's user-simulator guidelines (the variant without user tools: airline's users have none)."""
    return resources.files("seal_envs.users").joinpath("tau2_simulation_guidelines.md").read_text()


def render_scenario(scenario: dict[str, Any]) -> str:
    """A task's ``user_scenario`` as tau2 writes it into the user's prompt."""
    instructions = scenario.get("instructions")
    if isinstance(instructions, dict):
        lines = []
        for key, head in SCENARIO_FIELDS:
            value = instructions.get(key)
            if value is not None:
                lines.append(head + (value if key == "domain" else textwrap.indent(str(value), "\t")))
        instructions = "\n".join(lines)
    parts = [f"Persona:\n{textwrap.indent(scenario['persona'], chr(9))}"] if scenario.get("persona") else []
    parts.append(f"Instructions:\n{textwrap.indent(str(instructions), chr(9))}")
    return "\n".join(parts)


def system_prompt(scenario: dict[str, Any]) -> str:
    """The user simulator's system prompt for one task."""
    return f"{guidelines()}\n\n<scenario>\n{render_scenario(scenario)}\n</scenario>"


def user_stop(text: str) -> str | None:
    """Which of tau2's user stop tokens ``text`` holds (its termination name), if any."""
    return next((name for token, name in USER_STOP_TOKENS.items() if token in text), None)


def agent_stop(text: str) -> bool:
    """The agent ended the conversation with tau2's stop token."""
    return AGENT_STOP_TOKEN in text


@dataclass(frozen=True)
class UserMessage:
    """One message of the user simulator; ``stop`` names the stop token it ended the conversation with."""

    text: str
    stop: str | None = None


class LLMUser:
    """One episode at a time: ``start(scenario)`` gives the user's first message, ``reply(agent_text)`` each next."""

    def __init__(self, chat: Chat, config: UserConfig):
        self.chat = chat
        self.config = config
        self._conversation: list[Message] = []

    def start(self, scenario: dict[str, Any]) -> UserMessage:
        self._conversation = [{"role": "system", "content": system_prompt(scenario)}]
        return self.reply(GREETING)

    def reply(self, agent_text: str) -> UserMessage:
        self._conversation.append({"role": "user", "content": agent_text})
        try:
            text = self.chat(self._conversation)
        except UserError:
            raise
        except Exception as exc:  # the backend's failure (HTTP, a timeout, a malformed answer), never the agent's
            raise UserError(f"the user simulator's backend failed: {type(exc).__name__}: {str(exc)[:500]}") from None
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"the user simulator sent an empty message ({text!r:.80})")
        text = text.strip()[: self.config.max_reply_chars]
        self._conversation.append({"role": "assistant", "content": text})
        return UserMessage(text, user_stop(text))
