"""Airline booking and flight operations (Aurora Air): importing the package registers seed and tools."""

from . import seed, tools
from .core import env

__all__ = ["env", "seed", "tools"]
