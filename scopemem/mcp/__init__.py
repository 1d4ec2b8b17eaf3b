"""``scopemem mcp``: memory as an MCP server, on the official ``mcp`` SDK.

* ``plugin`` registers the command through ``scopemem_register_commands``; it imports
  nothing of the SDK, so listing plugins works without it installed.
* ``server`` builds the SDK's server with the six tools and runs it over stdio or
  streamable HTTP, draining pending reflections before it exits.
* ``operations`` is the adapter between the tools and scopemem's own operations: the one
  place that calls the command executors and the store.
* ``models`` holds the tools' structured results (their output schemas).

The caller's identity is the server's configuration (``[memory.mcp]``), never an argument.
"""
