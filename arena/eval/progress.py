"""Progress of long steps: rich bars and spinners on a terminal, plain lines elsewhere (a log, CI, a pipe),
where rich would show nothing until the end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

PLAIN_EVERY_S = 10.0
_STATS = "success {success:.0%}  infra {infra}  {eps:.1f} ep/s"
_BAR_STATS = "success {task.fields[success]:.0%}  infra {task.fields[infra]}  {task.fields[eps]:.1f} ep/s"


@contextmanager
def stage(console: Console, text: str) -> Iterator[None]:
    """A spinner with ``text`` on a terminal; else a line when the step starts and one when it is done."""
    if console.is_terminal:
        with console.status(text):
            yield
        return
    started = time.monotonic()
    console.print(text, highlight=False, soft_wrap=True)
    yield
    console.print(f"{text.rstrip('…')} done in {time.monotonic() - started:.1f} s", highlight=False)


class EpisodeProgress:
    """Episodes done of ``total`` with running success, infra errors and speed: a rich bar on a terminal,
    else one plain line every ``every_s`` seconds and a last one when done."""

    def __init__(self, console: Console, title: str, total: int, every_s: float = PLAIN_EVERY_S) -> None:
        self.console, self.title, self.total, self.every_s = console, title, total, every_s
        self._bar: Progress | None = None
        self._started = self._printed = time.monotonic()
        self._line = f"{title}: 0/{total} episodes"

    def __enter__(self) -> EpisodeProgress:
        if self.console.is_terminal:
            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(_BAR_STATS),
                TimeElapsedColumn(),
            )
            self._bar = Progress(*columns, console=self.console, transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.title, total=self.total, success=0.0, infra=0, eps=0.0)
        else:
            self.console.print(self._line, highlight=False)
        return self

    def update(self, done: int, fields: dict[str, Any]) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, **fields)
            return
        elapsed = time.monotonic() - self._started
        self._line = f"{self.title}: {done}/{self.total} episodes  {_STATS.format(**fields)}  {elapsed:.0f} s"
        if time.monotonic() - self._printed >= self.every_s or done == self.total:
            self.console.print(self._line, highlight=False)
            self._printed = time.monotonic()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)
