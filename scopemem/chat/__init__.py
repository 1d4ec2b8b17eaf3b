"""The chat surface: the ``memory list|forget|sweep|remember`` grammar a chat adapter hands
a person's message to, answered as reply text."""

from scopemem.chat.commands import CommandContext, handle_command

__all__ = ["CommandContext", "handle_command"]
