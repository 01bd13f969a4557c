"""The user of an episode: the task's fixed turns (``scripted``), or an LLM user simulator that follows tau2-bench's
protocol behind an OpenAI-compatible endpoint or on a local Hugging Face model (``UserConfig``, ``make_user``)."""

from seal_envs.users.config import UserConfig
from seal_envs.users.simulator import GREETING, LLMUser, UserError, UserMessage, agent_stop, system_prompt, user_stop


def make_user(config: UserConfig) -> LLMUser | None:
    """The LLM user of ``config`` (None for the scripted user, whose turns are the task's)."""
    if not config.conversational:
        return None
    from seal_envs.users.backends import make_chat

    return LLMUser(make_chat(config), config)


__all__ = ["GREETING", "LLMUser", "UserConfig", "UserError", "UserMessage", "agent_stop", "make_user",
           "system_prompt", "user_stop"]
