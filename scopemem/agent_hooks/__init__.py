"""Coding-agent hooks: ``scopemem hook <event>`` for Claude Code (docs/coding-agents.md).

``payload`` parses the hook JSON and renders the answer, ``scopemem.gitremote`` (shared with
the MCP server) derives the repo scope from the working directory, ``transcript`` reads the
session's JSONL transcript, ``ledger`` remembers what was reflected, ``runner`` does one
hook's work and ``plugin`` is the command.
"""
