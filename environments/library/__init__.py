"""Built-in environments: one package per environment, each exposing a module-level ``env``."""
