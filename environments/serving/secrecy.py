"""Keeping the server's secret (its control token) from other processes of the same uid."""

from __future__ import annotations

import ctypes
import functools
import sys

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


def hide_process_memory() -> None:
    """Mark this process not dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``): its ``/proc/<pid>/environ``,
    ``mem`` and ``fd`` then belong to root, so a process of the same uid (in a container, ``auto`` mode's
    plain sandbox child) cannot read the control token from them. A child gets its own setting back at
    ``exec``. Elsewhere than Linux nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    libc = _libc()
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def process_memory_hidden() -> bool:
    """Whether this process is not dumpable (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    return _libc().prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


@functools.cache
def _libc() -> ctypes.CDLL:
    """This process's C library, loaded once (the health check asks on every probe)."""
    return ctypes.CDLL(None, use_errno=True)
