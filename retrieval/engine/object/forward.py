"""The forward index of an object searcher (image id -> its words, weights, frames and size), read from saved
arrays without building a per-image object. Saved words may be uint16 (returned as int32); weights absent from the
arrays (hard assignment) are ones; frames absent (``keep_frames=False``) are None: the feature store has them."""

from __future__ import annotations

import numpy as np

__all__ = ["EntryLookup", "ForwardEntries", "forward_words_dtype"]


def forward_words_dtype(n_words: int):
    """The dtype of the saved words of the forward index: uint16 up to 65,536 words, else int32."""
    return np.uint16 if n_words <= 1 << 16 else np.int32


class EntryLookup:
    """``entries[id]`` (KeyError when absent) and ``id in entries`` from the class's ``get(id)`` (None when
    absent): the forward index of one searcher and of several parts read alike."""

    def get(self, image_id, default=None):
        raise NotImplementedError

    def __getitem__(self, image_id):
        entry = self.get(image_id)
        if entry is None:
            raise KeyError(image_id)
        return entry

    def __contains__(self, image_id) -> bool:
        return self.get(image_id) is not None


class ForwardEntries(EntryLookup):
    """The forward index of an :class:`ObjectSearcher`: image id -> (words (F, r) int32, weights (F, r) float32,
    frames (F, 6) float32, size (w, h)).

    The entries of a loaded searcher stay in their saved arrays (memory-mapped; an id is found by a binary search
    of the sorted ids, no per-image object is built when a searcher is opened); entries added later are kept in a
    dict, and removed ids are remembered until the next save writes the arrays again."""

    def __init__(self, arrays: dict | None = None):
        self._added = {}
        self._removed = set()
        if arrays is None:
            self._ids = np.empty(0, np.int64)
            self._order = self._ids
            self._arrays = None
            return
        self._ids = np.asarray(arrays["ids"], np.int64)
        self._order = np.argsort(self._ids, kind="stable")
        self._arrays = arrays

    def _saved(self, image_id: int):
        if not len(self._ids) or image_id in self._removed:
            return None
        pos = int(np.searchsorted(self._ids, image_id, sorter=self._order))
        if pos >= len(self._ids) or self._ids[self._order[pos]] != image_id:
            return None
        j = int(self._order[pos])
        a = self._arrays
        lo, hi = int(a["indptr"][j]), int(a["indptr"][j + 1])
        words = np.asarray(a["words"][lo:hi], np.int32)
        weights = a["weights"][lo:hi] if "weights" in a else np.ones(words.shape, np.float32)   # hard: all 1
        frames = a["frames"][lo:hi] if "frames" in a else None   # not kept: read from the feature store
        return words, weights, frames, tuple(int(v) for v in a["sizes"][j])

    def get(self, image_id, default=None):
        image_id = int(image_id)
        if image_id in self._added:
            return self._added[image_id]
        entry = self._saved(image_id)
        return default if entry is None else entry

    def update(self, entries: dict) -> None:
        for i, entry in entries.items():
            self._removed.discard(int(i))
            self._added[int(i)] = entry

    def pop(self, image_id, default=None):
        entry = self.get(image_id)
        self._added.pop(int(image_id), None)
        if entry is not None:
            self._removed.add(int(image_id))
        return default if entry is None else entry
