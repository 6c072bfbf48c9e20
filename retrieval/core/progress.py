"""Progress reporting. Library code takes an optional ``progress`` callback; the CLI turns it into a bar on stderr.

A terminal gets a redrawn bar (tqdm); anything else (a pipe, a file, a CI log) gets plain lines, at most one every
:data:`PLAIN_INTERVAL` seconds plus one at the end, never a carriage return.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

ProgressCallback = Callable[[int, int], None]
"""``progress(done, total)``: called after each batch."""

PLAIN_INTERVAL = 10.0
"""Seconds between two plain progress lines when stderr is not a terminal."""


def stderr_is_terminal() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):
        return False


class PlainProgress:
    """The subset of tqdm's interface used here (``n``, ``total``, ``update``, ``close``, a context manager) writing
    ``desc: done/total (pct)`` lines to stderr: the first update, then at most one line per ``interval`` seconds,
    and a last line on close when something was done since the previous one."""

    def __init__(self, total: int | None, desc: str, *, enabled: bool = True, unit: str = "it",
                 interval: float = PLAIN_INTERVAL, stream=None):
        self.total, self.desc, self.unit, self.interval = total, desc, unit, interval
        self.disable = not enabled
        self.n = 0
        self._stream = stream
        self._last_time = None
        self._last_n = None
        self._t0 = time.monotonic()

    def _line(self) -> None:
        if self.disable:
            return
        stream = self._stream or sys.stderr
        if self.total:
            text = f"{self.desc}: {self.n}/{self.total} {self.unit} ({100.0 * self.n / self.total:.0f} %)"
        else:
            text = f"{self.desc}: {self.n} {self.unit}"
        stream.write(f"{text}, {time.monotonic() - self._t0:.0f} s\n")
        stream.flush()
        self._last_time, self._last_n = time.monotonic(), self.n

    def update(self, k: int = 1) -> None:
        self.n += k
        if self._last_time is None or time.monotonic() - self._last_time >= self.interval:
            self._line()

    def close(self) -> None:
        if self._last_n is not None and self._last_n != self.n:
            self._line()
        self.disable = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_bar(total: int | None, desc: str, *, enabled: bool = True, unit: str = "it"):
    """A progress display on stderr: a tqdm bar on a terminal, :class:`PlainProgress` lines otherwise (disabled
    when ``enabled`` is False)."""
    if not stderr_is_terminal():
        return PlainProgress(total, desc, enabled=enabled, unit=unit)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, dynamic_ncols=True,
                leave=False)


def callback_for(bar) -> ProgressCallback:
    """A ``progress(done, total)`` callback that moves ``bar`` to ``done``."""

    def cb(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return cb
