"""Errors of the Agent-World importer."""


class MalformedEnvironment(ValueError):
    """An environment of the release cannot be imported; the message says why."""
