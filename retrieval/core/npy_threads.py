"""Reading ``.npy`` headers from several threads on the CPython versions that cannot.

numpy parses each ``.npy`` header (every ``np.load``, every member of an ``.npz``) with ``ast.literal_eval``.
CPython 3.11 before 3.11.8 and 3.12.0 fail when two threads build syntax trees at once (``SystemError: AST
constructor recursion depth mismatch``, CPython gh-106905): searches read feature-store entries on several threads
while a writer opens arrays. :func:`serialise_npy_headers` puts numpy's header reader behind one lock on those
versions only (the header is a few hundred bytes: the arrays themselves are still read side by side); on others
it does nothing. Called once when :mod:`retrieval.core.persistence` is imported.
"""

from __future__ import annotations

import functools
import sys
import threading

__all__ = ["affected", "serialise_npy_headers"]

_LOCK = threading.Lock()
_INSTALLED: list = []   # the wrapper put in place (a second call finds it)


def affected(version=None) -> bool:
    """Whether this CPython (or ``version``, a ``sys.version_info``-like tuple) has gh-106905."""
    v = tuple(version or sys.version_info)[:3]
    return (3, 11, 0) <= v < (3, 11, 8) or v == (3, 12, 0)


def serialise_npy_headers() -> bool:
    """Wrap numpy's ``.npy`` header reader in one process-wide lock when :func:`affected` (once); True when it is
    wrapped."""
    if not affected():
        return False
    try:
        from numpy.lib import _format_impl as fmt
    except ImportError:   # numpy 1.x
        from numpy.lib import format as fmt
    reader = getattr(fmt, "_read_array_header", None)
    if reader is None:
        return False
    if reader in _INSTALLED:
        return True

    @functools.wraps(reader)
    def locked(*args, **kwargs):
        with _LOCK:
            return reader(*args, **kwargs)

    _INSTALLED.append(locked)
    fmt._read_array_header = locked   # read_array and open_memmap call it by this module-level name
    return True
