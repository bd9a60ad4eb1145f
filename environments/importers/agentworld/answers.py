"""The replay rule: does a replayed tool output reproduce a released reference answer?

Two JSON values match when they have the same structure (same object keys, same list lengths,
in order) and equal leaves (numbers within 1e-9), except for *time-dependent* leaves, which are
forgiven when they differ. A leaf of the replayed output is time-dependent when

* it is a string holding a clock reading of the replay itself -- an ISO-8601 date/datetime or a
  Unix epoch (10 digits for seconds, 13 for milliseconds) that falls within the replay's wall-clock
  window widened by one day -- and both strings are equal once every such token is replaced by
  ``<time>`` (so ``evt-1785900022697`` matches ``evt-1763758000123``, ``2026-08-05T08:33:45Z``
  matches the time of the replay, but a different data date such as ``dtstart`` does not); or
* it is a number under a timing key (``latency_ms``, ``elapsed``, ``duration_s``...) or an epoch
  number within the window, and the reference is a number too.

A reference whose released text is not valid JSON (the release truncates long answers) matches
when the output, serialised like the release (``json.dumps``), starts with the reference text up
to its last complete value, after replacing every date/epoch token in both by ``<time>``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

CLOCK_SLACK = timedelta(days=1)
TIME_TOKEN = "<time>"
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_EPOCH = re.compile(r"(?<![\d.])\d{10}(?:\d{3})?(?:\.\d+)?(?!\d)")
_TIMING_KEY = re.compile(r"(latency|elapsed|duration|took|runtime)(_?(ms|s|sec|secs|seconds|millis))?$", re.I)
_VALUE_BOUNDARY = re.compile(r", |: ")


@dataclass(frozen=True)
class ClockWindow:
    """The wall-clock span of a replay, widened by ``CLOCK_SLACK`` on both sides."""

    start: datetime
    end: datetime

    @classmethod
    def around(cls, start: datetime, end: datetime) -> ClockWindow:
        return cls(start - CLOCK_SLACK, end + CLOCK_SLACK)

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment <= self.end


@dataclass(frozen=True)
class Match:
    """A successful comparison; ``forgiven`` lists the JSON paths of time-dependent differences."""

    forgiven: tuple[str, ...]


def _epoch_time(value: float) -> datetime | None:
    seconds = value / 1000 if value >= 1e12 else value
    if not 1e9 <= seconds < 1e10:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def _iso_time(token: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(token.replace(" ", "T"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _has_clock_reading(text: str, window: ClockWindow) -> bool:
    moments = [_iso_time(m.group()) for m in _ISO.finditer(text)]
    moments += [_epoch_time(float(m.group())) for m in _EPOCH.finditer(text)]
    return any(m is not None and window.contains(m) for m in moments)


def mask_time(text: str) -> str:
    """``text`` with every date/datetime/epoch token replaced by ``<time>``."""
    return _EPOCH.sub(TIME_TOKEN, _ISO.sub(TIME_TOKEN, text))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_leaf(ref: Any, out: Any) -> bool:
    if _is_number(ref) and _is_number(out):
        return math.isclose(ref, out, rel_tol=1e-9, abs_tol=1e-9)
    return type(ref) is type(out) and ref == out


def _time_dependent(key: str, ref: Any, out: Any, window: ClockWindow) -> bool:
    if _is_number(ref) and _is_number(out):
        moment = _epoch_time(float(out))
        return bool(_TIMING_KEY.search(key)) or (moment is not None and window.contains(moment))
    if isinstance(ref, str) and isinstance(out, str):
        return _has_clock_reading(out, window) and mask_time(out) == mask_time(ref)
    return False


def _walk(ref: Any, out: Any, window: ClockWindow, path: str, key: str, forgiven: list[str]) -> bool:
    if isinstance(ref, dict) and isinstance(out, dict):
        return ref.keys() == out.keys() and all(
            _walk(ref[k], out[k], window, f"{path}.{k}", k, forgiven) for k in ref
        )
    if isinstance(ref, list) and isinstance(out, list):
        return len(ref) == len(out) and all(
            _walk(r, o, window, f"{path}[{i}]", key, forgiven)
            for i, (r, o) in enumerate(zip(ref, out, strict=True))
        )
    if _same_leaf(ref, out):
        return True
    if _time_dependent(key, ref, out, window):
        forgiven.append(path)
        return True
    return False


def match_answer(reference: Any, output: Any, window: ClockWindow) -> Match | None:
    """Compare a parsed reference answer with a replayed output under the rule above."""
    forgiven: list[str] = []
    return Match(tuple(forgiven)) if _walk(reference, output, window, "$", "", forgiven) else None


def match_truncated(reference_text: str, output: Any) -> Match | None:
    """Prefix comparison for a reference whose released text is cut off (not valid JSON)."""
    cuts = [m.start() for m in _VALUE_BOUNDARY.finditer(reference_text)]
    prefix = mask_time(reference_text[: cuts[-1]] if cuts else reference_text)
    for ensure_ascii in (False, True):
        if mask_time(json.dumps(output, ensure_ascii=ensure_ascii)).startswith(prefix):
            return Match(("(prefix of a truncated reference)",))
    return None
