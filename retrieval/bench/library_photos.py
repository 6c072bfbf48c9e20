"""The photos of ``retrieval bench library`` (:mod:`retrieval.bench.library`): the real source photos, extracted
once into the workdir's feature store, and the replicas -- distinct 8x8 PNG files, 1,000 per folder, each with the
feature-store entry of a perturbed copy (or a hard link) of its source's features."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np

KEEP_FRACTION = 0.9
"""Share of the source's features a perturbed copy keeps."""
PER_FOLDER = 1000
SOURCE_SETS = (("holidays805", "jpg"), ("ukbench400",), ("oxford133", "jpg"))


# ---------------------------------------------------------------------------------------------- sources
def full_size_photos(data_dir) -> list[Path]:
    """The photos of the shared data that are not thumbnails: the 112 of minibench and the 133 of Oxford
    (sorted per set); ValueError (one line) when they are missing."""
    data = Path(data_dir).resolve()
    bench_file, oxford = data / "minibench.json", data / "real" / "oxford133" / "jpg"
    if not bench_file.is_file() or not oxford.is_dir():
        raise ValueError(f"{data}: minibench.json and real/oxford133/jpg are needed for --full-size.")
    images = json.loads(bench_file.read_text("utf-8"))["images"]
    return sorted((data / rel).resolve() for rel in images) + sorted(oxford.glob("*.jpg"))


def source_photos(data_dir, full_size: bool = False) -> list[Path]:
    """The real source photos (sorted per set); ``full_size``: only :func:`full_size_photos`; ValueError (one line)
    when the sets are missing."""
    if full_size:
        return full_size_photos(data_dir)
    real = Path(data_dir).resolve() / "real"
    out = []
    for parts in SOURCE_SETS:
        folder = real.joinpath(*parts)
        if not folder.is_dir():
            raise ValueError(f"{folder}: missing; 'retrieval bench library' reads the real sets holidays805, ukbench400 "
                             f"and oxford133 of the shared data folder (--data).")
        out += sorted(folder.glob("*.jpg"))
    return out


def hash_bytes(data: bytes) -> str:
    """:func:`retrieval.features.store.file_hash` of a file holding ``data``."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def prepare_sources(data_dir, store, extractor, record: Path, workers=None, limit: int | None = None,
                    full_size: bool = False) -> dict:
    """The source photos in a seeded random order (the first ``limit`` only, when given), their features
    extracted into ``store`` when missing; ``record``: a JSON file keeping the extraction time of the run that
    extracted them.

    Returns ``{"paths": [...], "hashes": [...] (the source of replica i is number ``i % len(paths)``),
    "extract_s_per_photo": wall seconds per photo of that extraction, with ``workers`` processes (None when
    unknown), "extracted": how many this run extracted}``."""
    from retrieval.core.persistence import write_json_atomic
    from retrieval.features.parallel import extract_many
    from retrieval.features.store import file_hash

    paths = source_photos(data_dir, full_size)
    paths = [paths[i] for i in np.random.default_rng(0).permutation(len(paths))][:limit]
    hashes = [file_hash(p) for p in paths]
    key = extractor.config_key
    need = [i for i, h in enumerate(hashes) if (h, key) not in store]
    t0 = time.perf_counter()
    for j, res in extract_many([paths[i] for i in need], extractor, workers=workers):
        if isinstance(res, Exception):
            raise ValueError(f"{paths[need[j]]}: cannot extract the features of this source photo ({res}).")
        store.put(hashes[need[j]], res, key)
    seconds = time.perf_counter() - t0
    if need:
        write_json_atomic(record, {"extract_s_per_photo": round(seconds / len(need), 4), "photos": len(need),
                                   "workers": workers or os.cpu_count()})
    timing = json.loads(record.read_text("utf-8")) if record.is_file() else {}
    # the replicas of the whole thumbnail set keep their first contents; any other set of sources (--full-size,
    # --sources N) salts its replicas, so that two sets never share a replica's feature-store entry
    canonical = not full_size and limit is None
    salt = "" if canonical else hashlib.blake2b("".join(hashes).encode("ascii"), digest_size=6).hexdigest()
    return {"paths": [str(p) for p in paths], "hashes": hashes, "salt": salt,   # hex
            "extract_s_per_photo": timing.get("extract_s_per_photo"), "extracted": len(need)}


# ---------------------------------------------------------------------------------------------- replicas
def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def replica_png(i: int, salt: bytes = b"") -> bytes:
    """A distinct 8x8 RGB PNG for replica ``i`` (its pixels encode ``i``, and ``salt``: the replicas of another set
    of sources have other contents, so their feature-store entries never mix), written directly: a PNG signature,
    IHDR, one IDAT (each row after a filter byte 0) and IEND."""
    code = int(i).to_bytes(8, "little")
    pixels = ((code + bytes(b ^ 0x5A for b in code[::-1]) + bytes([i % 251]) + salt) * 12)[:8 * 8 * 3]
    raw = b"".join(b"\x00" + pixels[24 * r:24 * (r + 1)] for r in range(8))
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(raw)) + _png_chunk(b"IEND", b""))


def replica_path(photos: Path, i: int) -> Path:
    return photos / f"{i // PER_FOLDER:04d}" / f"r{i:07d}.png"


def replica_number(path) -> int:
    return int(Path(path).stem[1:])


def write_replicas(photos: Path, numbers, sources: dict, store, key: str, sync_limit: int) -> int:
    """Write the files of replicas ``numbers`` (when missing) and their feature-store entries (when missing):
    perturbed copies below ``sync_limit``, hard links from it on (module docstring). Returns files written."""
    from retrieval.features.types import LocalFeatures

    numbers = sorted(int(i) for i in numbers)
    S = len(sources["hashes"])
    by_source: dict[int, list[tuple[int, str]]] = {}
    written = 0
    salt = bytes.fromhex(sources.get("salt", ""))
    for i in numbers:
        data = replica_png(i, salt)
        path = replica_path(photos, i)
        if not path.is_file() or path.read_bytes() != data:   # missing, or written by another version
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            written += 1
        h = hash_bytes(data)
        if (h, key) not in store:
            by_source.setdefault(i % S, []).append((i, h))
    for s, reps in by_source.items():
        src_hash = sources["hashes"][s]
        src_entry = store.entry_path(src_hash, key)
        feats = None
        for i, h in reps:
            if i >= sync_limit:
                dst = store.entry_path(h, key)
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp = dst.with_name(dst.name + ".tmp")
                tmp.unlink(missing_ok=True)
                os.link(src_entry, tmp)
                os.replace(tmp, dst)
                continue
            if feats is None:
                feats = store.get(src_hash, key)
            n = len(feats.descriptors)
            keep = np.sort(np.random.default_rng(i).choice(n, max(1, int(round(KEEP_FRACTION * n))), replace=False)) \
                if n else np.zeros(0, np.int64)
            store.put(h, LocalFeatures(frames=feats.frames[keep], descriptors=feats.descriptors[keep],
                                       image_size=feats.image_size, config=feats.config), key)
    return written


def prepare_library(photos: Path, n: int, sources: dict, store, key: str, sync_limit: int) -> int:
    """``photos`` holds exactly replicas 0..n-1 (leftovers of an interrupted run removed); returns files written."""
    photos.mkdir(parents=True, exist_ok=True)
    for folder in photos.iterdir():
        for p in folder.glob("r*.png"):
            if replica_number(p) >= n:
                p.unlink()
    return write_replicas(photos, range(n), sources, store, key, sync_limit)


