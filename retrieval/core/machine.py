"""What the machine has: its memory, read once per call from the operating system."""

from __future__ import annotations

import os

__all__ = ["memory_bytes", "share_of_memory_mb"]

ASSUMED_MEMORY = 8 << 30
"""The memory assumed where the system does not say (8 GiB)."""


def memory_bytes() -> int:
    """The machine's physical memory in bytes (``SC_PHYS_PAGES`` pages), :data:`ASSUMED_MEMORY` when unknown."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return ASSUMED_MEMORY
    return int(total) if total > 0 else ASSUMED_MEMORY


def share_of_memory_mb(fraction: float, low_mb: int, high_mb: int) -> int:
    """``fraction`` of the machine's memory in MB, clipped to ``[low_mb, high_mb]``."""
    return int(min(high_mb, max(low_mb, fraction * memory_bytes() / (1 << 20))))
