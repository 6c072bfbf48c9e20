"""Progress reporting. Library code takes an optional ``progress`` callback; the CLI turns it into a bar on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable

ProgressCallback = Callable[[int, int], None]
"""``progress(done, total)``: called after each batch."""


def progress_bar(total: int | None, desc: str, *, enabled: bool = True, unit: str = "it"):
    """Return a tqdm bar writing to stderr (disabled when ``enabled`` is False or stderr is not wanted)."""
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
