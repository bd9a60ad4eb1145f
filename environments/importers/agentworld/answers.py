"""The replay rule: does a replayed tool output reproduce a released reference answer?

Two JSON values match when they have the same structure (same object keys, same list lengths,
in order) and equal leaves (numbers within 1e-9), except for *time-dependent* leaves, which are
forgiven when they differ. A leaf of the replayed output is time-dependent when

* it is a string holding a clock reading of the replay itself -- an ISO-8601 date/datetime or a
  Unix epoch (10 digits for seconds, 13 for milliseconds, not glued to letters or digits) that
  falls within the replay's wall-clock window widened by one day -- and both strings are equal
  once every such token is replaced by ``<time>`` (so ``evt-1785900022697`` matches
  ``evt-1763758000123``, ``2026-08-05T08:33:45Z`` matches the time of the replay, but a different
  data date such as ``dtstart`` does not); or
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
_EPOCH = re.compile(r"(?<![A-Za-z0-9.])\d{10}(?:\d{3})?(?:\.\d+)?(?![A-Za-z0-9])")
_TIMING_KEY = re.compile(r"(latency|elapsed|duration|took|runtime)(_?(ms|s|sec|secs|seconds|millis))?$", re.I)
_VALUE_BOUNDARY = re.compile(r", |: ")
_ALNUM = re.compile(r"[A-Za-z0-9]")
_RUNS = re.compile(r"[A-Za-z0-9]+")
_TOKENS = re.compile(r"([A-Za-z0-9]+)")


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
    """A successful comparison: ``forgiven`` lists the JSON paths of time-dependent differences,
    ``random`` those of seed-dependent ones."""

    forgiven: tuple[str, ...]
    random: tuple[str, ...] = ()


MISSING = object()


def _same_shape(ref: Any, out: Any, alt: Any) -> bool:
    """``out`` differs under another session seed (``alt``) and ``ref`` has the shape of both: same
    type; for strings, same length, same punctuation, and the structural part that both seeds share
    at the start and the end (up to their last punctuation: ``wf_``)."""
    if alt is MISSING or alt == out or type(ref) is not type(out) or type(alt) is not type(out):
        return False
    if _is_number(ref):
        return True
    if not isinstance(ref, str):
        return False
    shortest, longest = sorted((len(out), len(alt)))
    if not shortest <= len(ref) <= longest or _RUNS.sub("x", ref) != _RUNS.sub("x", out):
        return False
    if shortest == longest and _ALNUM.sub("x", ref) != _ALNUM.sub("x", out):
        return False
    head = len(_structural(_common_prefix(out, alt)))
    tail = len(_structural(_common_prefix(out[::-1], alt[::-1])))
    return ref[:head] == out[:head] and (tail == 0 or ref[-tail:] == out[-tail:])


def _structural(shared: str) -> str:
    """A shared prefix cut after its last non-alphanumeric character (``wf_`` of ``wf_3a``): equal
    leading characters of two random draws are chance, not structure."""
    cut = max((i for i, c in enumerate(shared) if not c.isalnum()), default=-1)
    return shared[: cut + 1]


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


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


def _child(alt: Any, key: str | int) -> Any:
    if isinstance(key, int):
        return alt[key] if isinstance(alt, list) and key < len(alt) else MISSING
    return alt.get(key, MISSING) if isinstance(alt, dict) else MISSING


@dataclass
class _Forgiven:
    clock: list[str]
    random: list[str]
    known_random: frozenset[str] = frozenset()


def _shaped_like(ref: Any, out: Any) -> bool:
    """Same type; strings also of the same length and punctuation (a fresh draw of a random id)."""
    if type(ref) is not type(out):
        return _is_number(ref) and _is_number(out)
    return not isinstance(ref, str) or (len(ref) == len(out) and _ALNUM.sub("x", ref) == _ALNUM.sub("x", out))


def _walk(ref: Any, out: Any, alt: Any, window: ClockWindow, path: str, key: str, found: _Forgiven) -> bool:
    if isinstance(ref, dict) and isinstance(out, dict):
        return ref.keys() == out.keys() and all(
            _walk(ref[k], out[k], _child(alt, k), window, f"{path}.{k}", k, found) for k in ref
        )
    if isinstance(ref, list) and isinstance(out, list):
        return len(ref) == len(out) and all(
            _walk(r, o, _child(alt, i), window, f"{path}[{i}]", key, found)
            for i, (r, o) in enumerate(zip(ref, out, strict=True))
        )
    if _same_leaf(ref, out):
        return True
    if _time_dependent(key, ref, out, window):
        found.clock.append(path)
        return True
    if _same_shape(ref, out, alt) or (path in found.known_random and _shaped_like(ref, out)):
        found.random.append(path)
        return True
    return False


def match_answer(
    reference: Any,
    output: Any,
    window: ClockWindow,
    alternative: Any = MISSING,
    known_random: frozenset[str] = frozenset(),
) -> Match | None:
    """Compare a parsed reference answer with a replayed output under the rule above.

    ``alternative`` is the same step's output under another session seed: a leaf that differs
    between the two depends on randomness and is forgiven when the reference has its shape.
    ``known_random`` are paths the import replay found seed-dependent (kept with imported tasks):
    there a value of the reference's shape is accepted."""
    found = _Forgiven([], [], known_random)
    if not _walk(reference, output, alternative, window, "$", "", found):
        return None
    return Match(tuple(found.clock), tuple(found.random))


def _token_match(ref: list[str], out: list[str], alt: list[str] | None) -> bool:
    """Token-wise prefix comparison; a token that differs between the seeds may differ (same length)."""
    if len(ref) > len(out):
        return False
    for i, (r, o) in enumerate(zip(ref, out, strict=False)):
        if r == o:
            continue
        varies = alt is not None and i < len(alt) and alt[i] != o and len(alt[i]) == len(o)
        last = i == len(ref) - 1
        if not (varies and len(r) == len(o)) and not (last and o.startswith(r)):
            return False
    return True


def match_truncated(reference_text: str, output: Any, alternative: Any = MISSING) -> Match | None:
    """Prefix comparison for a reference whose released text is cut off (not valid JSON)."""
    cuts = [m.start() for m in _VALUE_BOUNDARY.finditer(reference_text)]
    prefix = mask_time(reference_text[: cuts[-1]] if cuts else reference_text)
    for ensure_ascii in (False, True):
        text = mask_time(json.dumps(output, ensure_ascii=ensure_ascii))
        if text.startswith(prefix):
            return Match(("(prefix of a truncated reference)",))
        if alternative is MISSING:
            continue
        alt = _TOKENS.split(mask_time(json.dumps(alternative, ensure_ascii=ensure_ascii)))
        if _token_match(_TOKENS.split(prefix), _TOKENS.split(text), alt):
            return Match(("(prefix of a truncated reference)",), ("(seed-dependent tokens)",))
    return None


def differences(reference: Any, output: Any, path: str = "$") -> list[tuple[str, Any, Any]]:
    """Where two JSON values differ: ``(path, reference part, output part)`` per differing leaf or
    structure (missing key, different list length, different type)."""
    if isinstance(reference, dict) and isinstance(output, dict):
        if reference.keys() != output.keys():
            return [(path, reference, output)]
        return [d for k in reference for d in differences(reference[k], output[k], f"{path}.{k}")]
    if isinstance(reference, list) and isinstance(output, list):
        if len(reference) != len(output):
            return [(path, reference, output)]
        pairs = enumerate(zip(reference, output, strict=True))
        return [d for i, (r, o) in pairs for d in differences(r, o, f"{path}[{i}]")]
    return [] if _same_leaf(reference, output) else [(path, reference, output)]


def clock_related(part: Any, key: str = "") -> bool:
    """Whether a JSON value holds a date/epoch token or a number under a timing key."""
    if _is_number(part):
        return bool(_TIMING_KEY.search(key)) or _epoch_time(float(part)) is not None
    text = part if isinstance(part, str) else json.dumps(part)
    return mask_time(text) != text
