"""Serving environments over MCP (streamable HTTP and stdio), with a separate control plane."""

from environments.serving.server import EnvServer

__all__ = ["EnvServer"]
