"""Deterministic randomness for released tool code: seeded from the session, reset with it.

Released implementations draw ids and tokens from ``random``, ``uuid.uuid4``, ``secrets`` and
``os.urandom``. While one of them runs, those sources are fed by a ``random.Random`` seeded with
``sha256(salt, session state digest, tool, arguments)``: the same call on the same session state
gives the same values (a replay and an agent see the same outputs), a session reset brings the
seed back, and every write moves the state, hence the seed, on. ``salt`` is
``$ARENA_AGENTWORLD_SEED`` (empty by default); the import replay runs a second time under another
salt to learn which output fields depend on randomness at all.

Not covered (documented in docs/importers.md): ``random.Random()`` / ``random.SystemRandom``
instances created by the tool itself with no seed (CPython seeds them in C), and the clock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

SEED_ENV = "ARENA_AGENTWORLD_SEED"


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


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[random.Random]:
    """Feed the module-level ``random`` functions and ``os.urandom`` from ``seed`` (restored after).

    ``uuid.uuid4`` reads ``os.urandom`` and ``secrets``/``random.SystemRandom`` read
    ``random._urandom`` at call time, so they follow. Callers hold the importer's exec lock: the
    patch is process-wide while it lasts.
    """
    rng = random.Random(seed)
    saved = random.getstate(), os.urandom, random._urandom  # type: ignore[attr-defined]
    random.seed(rng.getrandbits(64))
    os.urandom = random._urandom = rng.randbytes  # type: ignore[attr-defined]
    try:
        yield rng
    finally:
        random.setstate(saved[0])
        os.urandom, random._urandom = saved[1], saved[2]  # type: ignore[attr-defined]


def salt() -> str:
    return os.environ.get(SEED_ENV, "")
