"""The cheap side of every photo of one ``retrieval duplicates`` run, computed once.

Most candidate pairs are settled by the cheap check on the largest features of each photo
(:data:`retrieval.app.duplicates.pair_verifier.CHEAP_FEATURES`). A photo takes part in about 8 to 20 pairs, met in the order of
decreasing similarity, so on a large collection a bounded cache of described photos misses almost every time and
each check reads two stored feature files again (2 ms a pair at 10,000 photos, 8-11 ms at 100,000). Instead, before
verifying, one pass reads each photo's features once, keeps its feature count and its upright cheap side (the
largest features' frames and described descriptors, float32: the same values the check computed from them) in one
array per kind, and every check reads them from there. The arrays are memory maps of an unnamed temporary file
(in the index folder when it is writable, else the system's temporary folder; gone when the run ends): about 56 KB
a photo for the ``default`` preset's 64-d descriptors (5.6 GB at 100,000 photos, paged by the system, not held in
the process's memory).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

CHUNK = 256
"""Photos read and described between two progress calls."""


class CheapSides:
    """Feature counts and upright cheap sides of the photos ``ids`` (module docstring).

    Parameters
    ----------
    ids : indexed photo ids
    make : callable(id) -> ``(count, side)``: the photo's feature count and its cheap side
        (:class:`retrieval.rerank.verifier.Described`, or None when it has too few features for the cheap check)
    size : features of a cheap side
    threads : photos read side by side
    folder : where the temporary file goes (None or not writable: the system's temporary folder)
    progress : callable(done, total) or None

    Raises OSError when the temporary file cannot be made or its space reserved (the caller goes without).
    """

    def __init__(self, ids, make, *, size: int, threads: int = 1, folder=None, progress=None):
        from retrieval.core.threads import parallel_map, single_threaded_blas

        ids = [int(i) for i in ids]
        self.row = {i: r for r, i in enumerate(ids)}
        n = len(ids)
        self.counts = np.zeros(n, np.int64)
        self.lengths = np.zeros(n, np.int32)
        self.sizes = np.zeros((n, 2), np.int64)
        self.frames = self.descriptors = None
        self._files = []
        self._folder = folder if folder is not None and os.access(folder, os.W_OK) else None
        self.size = int(size)
        for s in range(0, n, CHUNK):
            with single_threaded_blas():
                made = parallel_map(make, ids[s:s + CHUNK], threads)
            for r, (count, side) in enumerate(made, start=s):
                self.counts[r] = count
                if side is None:
                    continue
                if self.descriptors is None:
                    self._allocate(n, side.descriptors.shape[1])
                m = len(side.frames)
                self.lengths[r] = m
                self.sizes[r] = side.image_size
                self.frames[r, :m] = side.frames
                self.descriptors[r, :m] = side.descriptors
            if progress is not None:
                progress(min(s + CHUNK, n), n)

    def _map(self, shape) -> np.ndarray:
        """A float32 array of ``shape`` mapped on a new unnamed temporary file, its space reserved first (OSError
        when the disk cannot hold it, rather than a crash when a page is written)."""
        fh = tempfile.TemporaryFile(dir=self._folder, prefix="duplicates-")
        self._files.append(fh)
        nbytes = int(np.prod(shape)) * 4
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fh.fileno(), 0, max(nbytes, 1))
        return np.memmap(fh, dtype=np.float32, mode="w+", shape=shape)

    def _allocate(self, n: int, d: int) -> None:
        self.frames = self._map((n, self.size, 6))
        self.descriptors = self._map((n, self.size, d))

    def count(self, image_id: int) -> int | None:
        """The photo's feature count (None: not among the run's photos)."""
        r = self.row.get(int(image_id))
        return None if r is None else int(self.counts[r])

    def side(self, image_id: int):
        """The photo's upright cheap side, a :class:`retrieval.rerank.verifier.Described` (None: not kept)."""
        from retrieval.rerank.verifier import Described

        r = self.row.get(int(image_id))
        if r is None or self.lengths[r] == 0:
            return None
        m = int(self.lengths[r])
        return Described(np.asarray(self.frames[r, :m]), np.asarray(self.descriptors[r, :m]),
                         (int(self.sizes[r, 0]), int(self.sizes[r, 1])))

    def close(self) -> None:
        """Release the memory maps and their temporary files."""
        self.frames = self.descriptors = None
        for fh in self._files:
            fh.close()
        self._files = []
