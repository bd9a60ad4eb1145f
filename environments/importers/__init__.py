"""Importers for environments from other sources; each registers its name namespace on import."""
