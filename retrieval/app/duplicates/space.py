"""What a duplicate action gives back to the disk: :func:`frees` (one step, read before it is carried out) and
:func:`freed_text` (an applied plan, in words)."""

from __future__ import annotations

import os

from retrieval.app.safe_files import same_device

__all__ = ["freed_text", "frees"]


def frees(action: str, step: dict) -> int:
    """Bytes of disk space a step frees (read before it is carried out): a file moved on its own filesystem, or to
    the trash (which is on it), still takes its room there: nothing; a file moved to another filesystem, or replaced
    by a link to its keeper, frees its size, unless it has other hard links (its bytes stay with them)."""
    st = os.stat(step["path"])
    if st.st_nlink > 1:
        return 0
    if action == "link" or (action == "move" and not same_device(step["path"], os.path.dirname(step["dest"]))):
        return int(st.st_size)
    return 0


def freed_text(action: str, freed: int, held: int, to: str | None = None) -> str:
    """What an applied plan did to the disk, in words: ``1.4 MB freed``; ``nothing freed: the 1.4 MB moved stay on
    the same disk (deleting them from DIR frees it)``; ``nothing freed; 1.4 MB in the trash, freed when it is
    emptied``."""
    from retrieval.core.units import human_bytes

    done = f"{human_bytes(freed)} freed" if freed else "nothing freed"
    if not held:
        return done
    if action == "trash":
        return f"{done}; {human_bytes(held)} in the trash, freed when it is emptied"
    return f"{done}: the {human_bytes(held)} moved stay on the same disk (deleting them from {to} frees it)"
