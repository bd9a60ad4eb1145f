"""Deterministic randomness for released tool code: seeded from the session, reset with it.

Released implementations draw ids and tokens from ``random``, ``uuid``, ``secrets`` and
``os.urandom``. Their code runs with its own ``__builtins__`` whose ``__import__`` hands it seeded
stand-ins for those four modules, fed by one ``random.Random`` per call seeded with
``sha256(salt, session state digest, tool, arguments)``: the same call on the same session state
gives the same values (a replay and an agent see the same outputs), a session reset brings the seed
back, and every write moves the state, hence the seed, on. ``salt`` is ``$ARENA_AGENTWORLD_SEED``
(empty by default); the import replay runs a second time under another salt to learn which output
fields depend on randomness at all.

Only the released code sees the stand-ins: the process's own modules are never patched, so the
server's session ids and tokens stay unpredictable. ``random.Random()`` and ``SystemRandom()``
created by the tool are seeded from the call's generator too. Not covered (docs/importers.md):
randomness drawn inside other libraries the tool imports (``tempfile`` names...) and the clock.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import random
import secrets
import uuid
from collections.abc import Mapping
from types import ModuleType
from typing import Any

SEED_ENV = "ARENA_AGENTWORLD_SEED"
SEEDED_MODULES = ("random", "uuid", "secrets", "os")


def call_seed(salt: str, state_digest: str, tool: str, arguments: Mapping[str, Any]) -> int:
    """The seed of one call: a hash of the salt, the session's state, the tool and its arguments."""
    text = json.dumps([salt, state_digest, tool, arguments], sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big")


def state_digest(files: Mapping[str, Any], rows: Mapping[str, Mapping[str, str]]) -> str:
    """A digest of a session's rows (the ``StateSnapshot`` read at the start of a call)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(repr(files[path]).encode() + b"\0")
    for table in sorted(rows):
        for key in sorted(rows[table]):
            digest.update(f"{table}\0{key}\0{rows[table][key]}\0".encode())
    return digest.hexdigest()


class _Overlay(ModuleType):
    """A module that answers from ``overrides`` first, then from the real module."""

    def __init__(self, real: ModuleType, overrides: Mapping[str, Any]) -> None:
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(overrides)
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def seeded_modules(seed: int) -> dict[str, ModuleType]:
    """Stand-ins for ``random``, ``uuid``, ``secrets`` and ``os`` drawing from ``Random(seed)``."""
    rng = random.Random(seed)

    class ChildRandom(random.Random):
        """``random.Random()`` / ``SystemRandom()`` in released code: seeded from the call's generator."""

        def __init__(self, x: Any = None) -> None:
            super().__init__(rng.getrandbits(64) if x is None else x)

    random_api = {
        name: getattr(rng, name)
        for name in dir(random.Random)
        if not name.startswith("_") and callable(getattr(rng, name))
    }
    fake_random = _Overlay(random, {**random_api, "Random": ChildRandom, "SystemRandom": ChildRandom})

    def token_bytes(nbytes: int | None = None) -> bytes:
        return rng.randbytes(32 if nbytes is None else nbytes)

    fake_secrets = _Overlay(
        secrets,
        {
            "token_bytes": token_bytes,
            "token_hex": lambda nbytes=None: token_bytes(nbytes).hex(),
            "token_urlsafe": lambda nbytes=None: (
                __import__("base64").urlsafe_b64encode(token_bytes(nbytes)).rstrip(b"=").decode("ascii")
            ),
            "choice": rng.choice,
            "randbelow": rng.randrange,
            "randbits": rng.getrandbits,
            "SystemRandom": ChildRandom,
        },
    )
    fake_uuid = _Overlay(uuid, {"uuid4": lambda: uuid.UUID(int=rng.getrandbits(128), version=4)})
    fake_os = _Overlay(os, {"urandom": rng.randbytes})
    return {"random": fake_random, "uuid": fake_uuid, "secrets": fake_secrets, "os": fake_os}


def seeded_builtins(seed: int) -> dict[str, Any]:
    """A ``__builtins__`` for released code whose imports of the seeded modules get the stand-ins."""
    modules = seeded_modules(seed)
    real_import = builtins.__import__

    def _import(
        name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level == 0 and name in modules:
            return modules[name]
        return real_import(name, globals_, locals_, fromlist, level)

    return {**vars(builtins), "__import__": _import}


def salt() -> str:
    return os.environ.get(SEED_ENV, "")
