"""``arena view``: a read-only local web app over the store (runs, episodes, evolve rounds)."""

from arena.view.app import create_app

__all__ = ["create_app"]
