"""The compact feature store of an index, opt in (``Index.create(compact_features=16)``, ``retrieval index
--compact-features 16``, ``retrieval compact --compact-features 16`` for an existing index).

The features of a photo are kept in one or two forms (:mod:`retrieval.features.store`): in full (152 bytes a
feature) and in compact form (:mod:`retrieval.features.compact`: 28 bytes with 16-byte descriptor codes, 44 with
32-byte ones). An index that opts in:

- encodes the photos a sync adds from their full features (extracted by that sync), so the compact form changes no
  encoding;
- writes their compact form before it publishes them (the store learns its descriptor codebook from the photos of
  the first sync that holds enough of them, :data:`~retrieval.features.compact.MIN_TRAINING_DESCRIPTORS`), so that a
  published photo is always verified on the same features;
- verifies on the compact form (:meth:`Searcher.features_of <retrieval.app.searcher.Searcher.features_of>`);
- then drops the full form when the store is its own (a store given at creation keeps both forms; the one a
  benchmark shares between presets, for instance).

What reads the full features later gets them again without loss: a sync extracts a photo whose entry is compact
again (a changed or re-added file), a query by an indexed photo describes its file again, ``retrieval check
--repair`` extracts again the photos it re-encodes (:func:`retrieval.app.integrity.exact_features_again`). The
compact form costs ranking accuracy (docs/results.md "The compact feature store"), which is why it is not the
default.
"""

from __future__ import annotations

from retrieval.app.catalog import SCAN_COLUMNS

__all__ = ["COMPACT_CHOICES", "EVIDENCE_ARRAYS", "check_compact_features", "compact_added", "convert_store",
           "evidence_added", "stored_evidence"]

EVIDENCE_ARRAYS = ("words", "signatures", "centres", "shapes")
"""The arrays of an image's verification evidence in the store (:class:`retrieval.rerank.evidence.Evidence`)."""

COMPACT_CHOICES = (0, 16, 32)
"""Bytes of a stored descriptor's codes: 0 (the full form only), 16 or 32."""

STATUS, HASH = SCAN_COLUMNS.index("status"), SCAN_COLUMNS.index("hash")   # columns of Catalog.scan rows


def check_compact_features(value) -> int:
    """``value`` as one of :data:`COMPACT_CHOICES` (ValueError naming it otherwise)."""
    try:
        v = int(value)
    except (TypeError, ValueError):
        v = -1
    if v not in COMPACT_CHOICES or isinstance(value, bool):
        raise ValueError(f"compact_features must be one of {', '.join(map(str, COMPACT_CHOICES))} (bytes of a "
                         f"descriptor's codes; 0 keeps the full features only); got {value!r}.")
    return v


def compact_added(index, added, rows=()) -> list:
    """Write the compact form of the features of ``added`` (hashes) when ``index`` opts in; when the store learns its
    codebook now, of the earlier indexed ``rows`` (Catalog.scan tuples) too. Returns the hashes that have a compact
    form ([] when the index keeps the full features only)."""
    M = index.compact_features
    if not M:
        return []
    store, key = index.store, index.extractor.config_key
    todo = list(added)
    if store.codebook(key) is None:
        if not rows and index.catalog.generation():   # a sync that did not read the rows (adding files)
            rows = index.catalog.scan()[1]
        todo = [r[HASH] for r in rows if r[STATUS] == "indexed"] + todo
    store.compact_entries(key, todo, M=M)
    return [h for h in dict.fromkeys(todo) if store.compact_path(h, key).is_file()]


def convert_store(index) -> dict:
    """The converter of an index's feature store to the compact form (``retrieval compact`` of an index that opts
    in): every indexed photo's compact form, then, in the index's own store, their full form dropped.
    ``{"compact": photos with a compact form, "full_dropped": full entries removed}``."""
    if not index.compact_features:
        return {"compact": 0, "full_dropped": 0}
    rows = [r for r in index.catalog.scan()[1] if r[STATUS] == "indexed"]
    compacted = compact_added(index, [r[HASH] for r in rows])
    dropped = index.store.drop_full(index.extractor.config_key, compacted) if index.owns_store else 0
    return {"compact": len(compacted), "full_dropped": dropped}


def evidence_added(store, config_key: str, model, hashes) -> int:
    """Write the verification evidence (:mod:`retrieval.rerank.evidence`, under ``model``) of the photos ``hashes``
    that lack it, from their stored features; returns how many were written. A sync calls it before it publishes
    the photos, so that a published photo is always verified on its evidence."""
    from retrieval.rerank.verifier import rootsift_descriptors

    done = 0
    for h in dict.fromkeys(hashes):
        if store.evidence_path(h, config_key, model.key).is_file():
            continue
        f = store.get(h, config_key)
        if f is None:
            continue
        desc = rootsift_descriptors(f.descriptors) if len(f) else None
        ev = model.database(desc if desc is not None else [], f.frames, f.image_size)
        store.put_evidence(h, config_key, model.key, ev.arrays())
        done += 1
    return done


def stored_evidence(store, config_key: str, model, content_hash: str):
    """The :class:`~retrieval.rerank.evidence.Evidence` of a photo under ``model``, or None when it has none."""
    from retrieval.rerank.evidence import Evidence

    arrays = store.get_evidence(content_hash, config_key, model.key, EVIDENCE_ARRAYS)
    return None if arrays is None else Evidence.from_arrays(arrays)
