"""Tool environments for Agent Arena: the authoring SDK, MCP serving, and the built-in library."""
