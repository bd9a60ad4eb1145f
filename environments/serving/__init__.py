"""Serving environments over MCP (streamable HTTP and stdio), with a separate control plane.

The server is ``environments.serving.server.EnvServer``; this package imports nothing itself, so the
arena's Ray workers, which only need the options and the process launcher, do not load the MCP server.
"""
