"""Quantities as a person reads them."""

from __future__ import annotations


def human_bytes(n) -> str:
    """``2.4 MB``, ``830 kB``, ``512 bytes`` (``unknown`` for None): never ``0.0 MB`` for a small file."""
    if n is None:
        return "unknown"
    n = int(n)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 100 * size else f"{n / size:.0f} {unit}"
    return f"{n} bytes"
