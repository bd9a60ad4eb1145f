"""Retail banking: customers, accounts, payees, cards and transactions, with money-movement rules."""

from . import seed, tools
from .environment import TODAY, env

__all__ = ["TODAY", "env", "seed", "tools"]
