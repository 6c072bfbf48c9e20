"""A photo library of N photos on one machine, run by ``retrieval bench library``.

What is real and what is not:

- **Sources (real).** The photos of ``real/holidays805/jpg``, ``real/ukbench400`` and ``real/oxford133/jpg`` are
  extracted once with the preset's extractor into the feature store ``WORKDIR/features`` (kept between runs; the
  index of every run uses it as its feature store). Replica ``i`` shows source ``s(i)``: the sources in a seeded
  random order, taken in turn, so that every N draws from the three sets alike.
- **Photo files (synthetic).** Replica ``i`` is a distinct 8x8 PNG whose pixels encode ``i`` (so its content hash
  is its own), at ``WORKDIR/library-<N>/photos/<i // 1000>/r<i>.png``: 1,000 photos per folder, as in a photo
  library. The index walks, stats and hashes them like any photo.
- **Features of a replica.** Its feature-store entry under its own content hash. Below ``sync_limit`` (10,000) it
  is a real perturbed copy: a random 90 % of the source's features, so that the normal sync encodes each replica
  into its own codes. From ``sync_limit`` on it is a hard link to the source's entry (an inode, not a copy).
- **Building the index (product path).** ``Index.create`` then ``Index.sync`` of the folder, as ``retrieval index
  DIR --index IDX`` runs them, for N <= ``sync_limit``.
- **Bulk injection (synthetic, beyond ``sync_limit`` only).** A normal sync of the first ``sync_limit`` replicas
  (paths given explicitly) trains the model and encodes them; every further replica gets the source's encoded
  global vector plus Gaussian noise (its own vector), re-normalised, added with ``backend.add_vectors`` (object
  presets: the source's words and weights and its signatures with 3 % of their bits flipped,
  :func:`object_replica`, added with ``backend.add_encoded``; the frames are those of the shared store entry) and
  published with its catalog rows by ``IndexFolder.publish`` in batches of :data:`INJECT_BATCH`
  (:data:`OBJECT_INJECT_BATCH`), the first batch recording the photo folder as the index's root (what a first folder sync
  records). That is the glue of :func:`inject`; everything measured afterwards runs through the product paths.

Then, each writer step in its own process (its peak RSS read with ``os.wait4``): a sync with nothing changed (the
walk and stat of the same tree timed apart, ``walk_stat_s``), adding 1 and ``add_many`` (1,000) new replicas
(their store entries made beforehand, like the other replicas: the timings are the index's work, extraction is
``extract_s_per_photo``), removing those ``add_many`` files (deleted, then a sync), and a merge
(``Index.compact()``, what ``retrieval compact`` runs). Then reading: ``retrieval query`` of a source photo
in a new process (time to its answer and its RSS), ``queries`` searches of source photos with and without spatial
verification (:meth:`Index.search_results` on a query built beforehand; the extraction of the query photo is
``query_extract_p50_ms``), and ``GET /api/info`` and a page of ``GET /api/images`` from ``retrieval serve`` on
loopback. Sizes: the search state of the committed generation (its ``gens/`` folder and any other search folder of
the index) per photo; the feature store per photo as it would be with real photos (the mean size of the replicas'
entries, each counted whole even when hard-linked).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from retrieval.bench.library_photos import (
    hash_bytes,
    prepare_library,
    prepare_sources,
    replica_path,
    replica_png,
    write_replicas,
)
from retrieval.bench.library_server import child_env, http_timings

SYNC_LIMIT = 10_000
"""Replicas below this number have perturbed copies of their source's features and go through the normal sync."""
INJECT_BATCH = 200_000
"""Replicas injected per publish (global presets beyond ``sync_limit``)."""
NOISE = 0.05
"""Standard deviation of the Gaussian noise added to each coordinate of an injected unit vector (before the
re-normalisation)."""
OBJECT_INJECT_BATCH = 20_000
"""Replicas injected per publish for an object preset (each holds its words, frames and signatures in memory)."""
OBJECT_FLIP = 0.03
"""Each bit of an injected object replica's signatures is flipped with this probability (its own codes); it keeps
every feature of its source, whose feature-store entry it shares (an index reads the frames of its images there)."""
FIRST_ANSWER_RUNS = 3


# ---------------------------------------------------------------------------------------------- the writer steps

def compile_package() -> None:
    """Compile the package's modules to bytecode (``__pycache__``), as an installed package has them: a new
    process then times what a user's does, not the compilation of every module, whatever
    ``PYTHONDONTWRITEBYTECODE`` says (a folder that cannot be written is left as it is)."""
    import compileall

    import retrieval

    compileall.compile_dir(str(Path(retrieval.__file__).parent), quiet=2)

def _sync_result(idx, report, seconds) -> dict:
    return {"seconds": round(seconds, 3), "added": report.added, "removed": report.removed,
            "unchanged": report.unchanged, "errors": len(report.errors), "stage_seconds": report.stage_seconds,
            "generation": report.generation, "images": idx.catalog.count("indexed")}


def step_build(index, photos, preset, store_dir, paths=None, compact_features=0) -> dict:
    """``Index.create`` then a sync of the folder ``photos`` (or of the explicit ``paths``)."""
    from retrieval.app.index import Index

    t0 = time.perf_counter()
    idx = Index.create(index, preset=preset, feature_store=store_dir, compact_features=compact_features)
    report = idx.sync(paths if paths is not None else photos, workers=1)
    return _sync_result(idx, report, time.perf_counter() - t0)


def step_sync(index, photos, prune: bool = False) -> dict:
    """``Index.open`` then the sync ``retrieval index PHOTOS --index INDEX [--prune]`` runs."""
    from retrieval.app.index import Index

    t0 = time.perf_counter()
    idx = Index.open(index)
    report = idx.sync(photos, workers=1, prune=prune)
    return _sync_result(idx, report, time.perf_counter() - t0)


def step_add(index, paths) -> dict:
    """``Index.open`` then ``Index.add(paths)``: what the server's upload runs (no walk of the photo folder)."""
    from retrieval.app.index import Index

    t0 = time.perf_counter()
    idx = Index.open(index)
    report = idx.add(paths)
    return _sync_result(idx, report, time.perf_counter() - t0)


def step_compact(index) -> dict:
    """``Index.compact()``: every segment merged into one (``retrieval compact``)."""
    from retrieval.app.index import Index

    t0 = time.perf_counter()
    idx = Index.open(index)
    out = idx.compact()
    return {"seconds": round(time.perf_counter() - t0, 3), "result": out, "generation": idx.catalog.generation(),
            "images": idx.catalog.count("indexed")}


def object_replica(rng, entry, signed) -> tuple:
    """An injected object replica (module docstring): the source's words, weights and frames, and its signatures
    with each bit flipped with :data:`OBJECT_FLIP`."""
    if signed is None:
        return entry, None
    uw, sigs = signed
    flips = np.packbits(rng.random((len(uw), sigs.shape[1] * 8)) < OBJECT_FLIP, axis=1)
    return entry, (np.asarray(uw, np.int64), np.asarray(sigs) ^ flips)


def inject(index, photos, start: int, stop: int, sources: dict, seed: int = 0) -> dict:
    """Bulk injection (module docstring): replicas ``start``..``stop - 1`` (files and store entries present) added
    to the index with their source's encoded vector plus noise, in publishes of :data:`INJECT_BATCH`."""
    from retrieval.app.catalog import CatalogChanges
    from retrieval.app.index import Index
    from retrieval.app.index_support import file_stat

    t0 = time.perf_counter()
    idx = Index.open(index)
    cat, folder, store, key = idx.catalog, idx.folder, idx.store, idx.extractor.config_key
    S = len(sources["hashes"])
    rng = np.random.default_rng(seed)
    numbers = list(range(int(start), int(stop)))
    with idx.folder.writer_lock():
        gen = cat.generation()
        backend = folder.load_backend(gen, fallback=False)
        objects = backend.kind == "object"
        if not objects and not getattr(backend, "encodes_vectors", False):
            raise ValueError(f"preset {idx.preset['name']!r} stores no global vectors: it cannot be injected.")
        used = sorted({i % S for i in numbers})
        meta, vec = {}, {}
        for s in used:
            f = store.get(sources["hashes"][s], key)
            meta[s] = (len(f.descriptors), f.image_size)
            vec[s] = backend.encoded(f) if objects else backend.encode([f])[0].astype(np.float32)
        root = str(Path(photos).resolve())
        step = OBJECT_INJECT_BATCH if objects else INJECT_BATCH
        for b in range(0, len(numbers), step):
            batch = numbers[b:b + step]
            next_id = int(cat.get_meta("next_id", 0))
            ids = np.arange(next_id, next_id + len(batch), dtype=np.int64)
            if objects:
                coded = [object_replica(rng, *vec[i % S]) for i in batch]
                backend.add_encoded(ids, {int(j): c[0] for j, c in zip(ids, coded, strict=True)},
                                    [c[1] for c in coded])
            else:
                V = np.stack([vec[i % S] for i in batch])
                V += rng.normal(0.0, NOISE, V.shape).astype(np.float32)
                V /= np.linalg.norm(V, axis=1, keepdims=True)
                backend.add_vectors(ids, V)
            rows = []
            salt = bytes.fromhex(sources.get("salt", ""))
            for image_id, i in zip(ids, batch, strict=True):
                p = str(replica_path(Path(root), i))
                size, mtime = file_stat(p)
                n_feat, (w, h) = meta[i % S]
                rows.append({"id": int(image_id), "path": p, "hash": hash_bytes(replica_png(i, salt)), "size": size,
                             "mtime": mtime, "width": int(w), "height": int(h), "orientation": 1,
                             "n_features": int(n_feat), "status": "indexed", "error": None})
            run_id = cat.start_run(f"bench library: {len(batch)} injected replicas")
            gen = folder.publish(cat, backend, CatalogChanges(
                run_id=run_id, next_id=next_id + len(batch), upserts=rows, stats={"added": len(batch)},
                extra_meta={"roots": [root]}), after=gen)
    return {"seconds": round(time.perf_counter() - t0, 3), "added": len(numbers), "generation": gen,
            "images": cat.count("indexed")}


def step_queries(index, queries, k: int = 10) -> dict:
    """Searches of the query photos: each query built once (:meth:`Index.query`: extraction), then searched
    without and with spatial verification; milliseconds per search."""
    from retrieval.app.index import Index

    idx = Index.open(index)
    built, extract_ms = [], []
    for q in queries:
        t = time.perf_counter()
        built.append(idx.query(q))
        extract_ms.append(1000 * (time.perf_counter() - t))
    out = {"extract_ms": extract_ms}
    for rerank in ("none", "spatial"):
        times, empty = [], 0
        for q in built:
            t = time.perf_counter()
            res = idx.search_results(q, k=k, rerank=rerank)
            times.append(1000 * (time.perf_counter() - t))
            empty += not res.hits
        out[rerank] = times
        out[f"{rerank}_empty"] = empty
    return out


STEPS = {"build": step_build, "sync": step_sync, "add": step_add, "compact": step_compact, "inject": inject,
         "queries": step_queries}


# ---------------------------------------------------------------------------------------------- processes
def peak_rss_mb(pid="self") -> float | None:
    """Peak resident memory of a process (``VmHWM`` of ``/proc/<pid>/status``, MB), None without it.

    Not ``ru_maxrss``: Linux keeps it across ``execve``, so a child's value starts at its parent's."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def run_child(cmd, workdir: Path, *, poll_rss: bool = False) -> tuple[float, str, float | None]:
    """Run ``cmd`` in a new process; (wall seconds, stdout, its peak RSS in MB: the ``VmHWM`` it writes to the
    file named by ``$RETRIEVAL_BENCH_HWM`` at exit (:func:`child_main`), or with ``poll_rss`` the last ``VmHWM``
    read every 5 ms while it runs). RuntimeError (one line) when it fails."""
    out_path, err_path, hwm_path = workdir / "child.out", workdir / "child.err", workdir / "child.hwm"
    hwm_path.unlink(missing_ok=True)
    env = dict(child_env(), RETRIEVAL_BENCH_HWM=str(hwm_path))
    rss = None
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        while poll_rss and proc.poll() is None:
            rss = peak_rss_mb(proc.pid) or rss   # a process that has exited has none: keep the last one read
            time.sleep(0.005)
        proc.wait()
        seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = err_path.read_text("utf-8", errors="replace").strip().splitlines()
        raise RuntimeError(f"{' '.join(map(str, cmd[2:5]))} failed (exit {proc.returncode}): "
                           f"{tail[-1] if tail else 'no message'} (log: {err_path})")
    if not poll_rss:
        rss = json.loads(hwm_path.read_text("utf-8")) if hwm_path.is_file() else None
    return seconds, out_path.read_text("utf-8"), rss


def run_step(name: str, workdir: Path, **kwargs) -> tuple[dict, float | None]:
    """One step of :data:`STEPS` in a new process (:func:`child_main`); (its JSON result, its peak RSS in MB)."""
    args = workdir / "child-args.json"
    args.write_text(json.dumps(kwargs), "utf-8")   # a file: a list of a million numbers exceeds argv's limits
    _, stdout, rss = run_child([sys.executable, "-m", "retrieval.bench.library", name, str(args)], workdir)
    return json.loads(stdout.strip().splitlines()[-1]), rss


def child_main(argv) -> None:
    """A child process running ``NAME ARGS_JSON_FILE``: the step of :data:`STEPS`, its result as one JSON line on
    stdout, its peak RSS written at exit to the file named by ``$RETRIEVAL_BENCH_HWM``."""
    import atexit

    hwm_file = os.environ.get("RETRIEVAL_BENCH_HWM")
    if hwm_file:
        atexit.register(lambda: Path(hwm_file).write_text(json.dumps(peak_rss_mb()), "utf-8"))
    name, kwargs = argv[0], json.loads(Path(argv[1]).read_text("utf-8"))
    sys.stdout.write(json.dumps(STEPS[name](**kwargs)) + "\n")


# ---------------------------------------------------------------------------------------------- measures
def walk_stat(folder) -> tuple[float, int]:
    """(seconds, files) of ``os.walk`` + ``os.stat`` of every file under ``folder``."""
    t0 = time.perf_counter()
    n = 0
    for dirpath, _, filenames in os.walk(folder):
        for f in filenames:
            os.stat(os.path.join(dirpath, f))
            n += 1
    return time.perf_counter() - t0, n


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def search_state_bytes(index: Path, generation: int) -> int:
    """Bytes of the committed generation's search state: its folder and the segments it lists
    (:meth:`IndexFolder.state_bytes <retrieval.app.folder.IndexFolder.state_bytes>`)."""
    from retrieval.app.index import Index

    idx = Index.open(index)
    try:
        return idx.folder.state_bytes(generation)
    finally:
        idx.close()


def _round(value, digits: int = 1):
    return None if value is None else round(float(value), digits)


def _percentile(values, q) -> float:
    return round(float(np.percentile(values, q)), 2)


def bench_one(n: int, *, preset: str, workdir: Path, sources: dict, store, key: str, queries: int,
              add_many: int = 1000, sync_limit: int = SYNC_LIMIT, progress=None, tag: str = "",
              compact_features: int = 0) -> dict:
    """Every figure for one N (module docstring); ``progress(message)`` is told each step; ``tag``: suffix of the
    folder of the sources' kind (their replicas differ); ``compact_features``: the index keeps its features in
    compact form (its synced photos verified on it; photos injected beyond ``sync_limit`` keep the full form)."""
    say = progress or (lambda message: None)
    base = workdir / f"library{tag}-{n}"
    photos, index = base / "photos", base / f"index-{preset}"
    base.mkdir(parents=True, exist_ok=True)
    store_dir = str(store.folder)
    say(f"N={n}: photo files and feature-store entries")
    t0 = time.perf_counter()
    prepare_library(photos, n, sources, store, key, sync_limit)
    prepare_s = time.perf_counter() - t0
    shutil.rmtree(index, ignore_errors=True)
    rss = {}
    out = {"n": n, "preset": preset, "prepare_s": round(prepare_s, 1)}

    injected = n > sync_limit
    say(f"N={n}: build ({min(n, sync_limit) if injected else n} photos through the sync)")
    paths = [str(replica_path(photos, i)) for i in range(sync_limit)] if injected else None
    build, rss["build"] = run_step("build", base, index=str(index), photos=str(photos), preset=preset,
                                   store_dir=store_dir, paths=paths, compact_features=compact_features)
    synced = min(n, sync_limit) if injected else n
    out.update(built_images=build["images"], synced_photos=synced, build_s=build["seconds"],
               add_photos_per_s=round(synced / build["seconds"], 1), build_stage_s=build["stage_seconds"],
               encode_ms_per_photo=round(1000 * build["stage_seconds"].get("encode", 0.0) / synced, 3))
    out["injected_photos"] = 0
    if injected:
        say(f"N={n}: bulk injection of {n - sync_limit} photos")
        inj, rss["inject"] = run_step("inject", base, index=str(index), photos=str(photos),
                                      start=sync_limit, stop=n, sources=sources)
        out.update(injected_photos=inj["added"], inject_s=inj["seconds"],
                   inject_photos_per_s=round(inj["added"] / inj["seconds"], 1), built_images=inj["images"])

    say(f"N={n}: no-change sync")
    nochange, rss["nochange_sync"] = run_step("sync", base, index=str(index), photos=str(photos))
    ws, files = walk_stat(photos)
    out.update(nochange_sync_s=nochange["seconds"], nochange_added=nochange["added"],
               nochange_stage_s=nochange["stage_seconds"], walk_stat_s=round(ws, 3), walk_stat_files=files)

    say(f"N={n}: add 1, add {add_many}, remove {add_many}")
    write_replicas(photos, [n], sources, store, key, sync_limit)
    add1, rss["add1"] = run_step("sync", base, index=str(index), photos=str(photos))
    many = range(n + 1, n + 1 + add_many)
    write_replicas(photos, many, sources, store, key, sync_limit)
    addm, rss["add_many"] = run_step("sync", base, index=str(index), photos=str(photos))
    for i in many:
        replica_path(photos, i).unlink()
    rem, rss["remove_many"] = run_step("sync", base, index=str(index), photos=str(photos), prune=True)
    out.update(add1_s=add1["seconds"], add1_added=add1["added"], add_many=add_many, add1000_s=addm["seconds"],
               add_many_added=addm["added"], remove1000_s=rem["seconds"], removed=rem["removed"])
    upload = n + 1 + add_many   # one more photo, added as the server adds an upload (Index.add: no walk)
    write_replicas(photos, [upload], sources, store, key, sync_limit)
    up, rss["add1_upload"] = run_step("add", base, index=str(index), paths=[str(replica_path(photos, upload))])
    out.update(add1_upload_s=up["seconds"], add1_upload_added=up["added"])

    say(f"N={n}: merge")
    merge, rss["merge"] = run_step("compact", base, index=str(index))
    out["merge_s"] = merge["seconds"]
    out["merge_segments"] = [merge["result"]["segments_before"], merge["result"]["segments_after"]]
    generation, images = merge["generation"], merge["images"]
    out.update(images=images, writer_rss_mb={k: _round(v) for k, v in rss.items()},
               writer_peak_rss_mb=_round(max((v for v in rss.values() if v is not None), default=None)))

    from retrieval.app.catalog import Catalog

    cat = Catalog(index / "catalog.db")
    hashes = [r["hash"] for r in cat.db.query("SELECT hash FROM images WHERE status = 'indexed'")]
    cat.close()
    entry_sizes = [store.entry_path(h, key).stat().st_size for h in hashes]
    inodes = {}
    for h in hashes:
        st = store.entry_path(h, key).stat()
        inodes[(st.st_dev, st.st_ino)] = st.st_size
    out.update(search_bytes_per_photo=round(search_state_bytes(index, generation) / images, 1),
               feature_bytes_per_photo=round(float(np.mean(entry_sizes)), 1),
               feature_bytes_on_disk_per_photo=round(sum(inodes.values()) / images, 1),
               compact_features=int(compact_features),
               verified_feature_bytes_per_photo=round(float(np.mean([store.entry_bytes(h, key, "compact" if
                                                                    compact_features else "full")
                                                                    for h in hashes])), 1),
               catalog_bytes_per_photo=round((index / "catalog.db").stat().st_size / images, 1),
               model_bytes=_tree_bytes(index / "model"))

    used = min(n, len(sources["paths"]))   # the sources of the replicas
    qpaths = [sources["paths"][int(j * used / queries)] for j in range(min(queries, used))]
    say(f"N={n}: first answer of a new process ({FIRST_ANSWER_RUNS} runs)")
    compile_package()
    firsts, reader = [], []
    for _ in range(FIRST_ANSWER_RUNS):
        seconds, stdout, peak = run_child([sys.executable, "-m", "retrieval.cli", "query", qpaths[0], "--index",
                                           str(index), "--format", "json"], base, poll_rss=True)
        if not json.loads(stdout):
            raise RuntimeError(f"'retrieval query {qpaths[0]}' answered no hit on the index {index}")
        firsts.append(seconds)
        reader.append(peak)
    out.update(first_answer_s=round(float(np.median(firsts)), 3), reader_rss_mb=_round(max((v for v in reader if v is not None), default=None)))

    say(f"N={n}: {len(qpaths)} queries with and without verification")
    q, rss_q = run_step("queries", base, index=str(index), queries=qpaths)
    out.update(queries=len(qpaths), query_p50_ms=_percentile(q["none"], 50), query_p95_ms=_percentile(q["none"], 95),
               query_verified_p50_ms=_percentile(q["spatial"], 50),
               query_verified_p95_ms=_percentile(q["spatial"], 95),
               query_extract_p50_ms=_percentile(q["extract_ms"], 50),
               queries_without_hits=q["none_empty"] + q["spatial_empty"], reader_after_queries_rss_mb=_round(rss_q))

    say(f"N={n}: 'retrieval serve': /api/info and /api/images")
    web = http_timings(index, images, base / "server.log")
    out.update(api_info_ms=_percentile(web["info"], 50), api_page_ms=_percentile(web["page"], 50),
               api_page_images=web["page_images"], http_requests=len(web["info"]))
    return out


def bench_library(ns, *, preset="default", workdir="bench-library", data_dir="../shared/data", queries: int = 50,
                  add_many: int = 1000, sync_limit: int = SYNC_LIMIT, sources: int | None = None, workers=None,
                  progress=None, full_size: bool = False, compact_features: int = 0):
    """Yield the figures of :func:`bench_one` for each N of ``ns`` (the sources extracted first, when missing;
    ``sources``: use only that many source photos; ``full_size``: replicate only the photos that are not
    thumbnails, :func:`~retrieval.bench.library_photos.full_size_photos`)."""
    from retrieval.engine.presets import load_preset, preset_config
    from retrieval.features import FeatureExtractor
    from retrieval.features.store import FeatureStore

    for n in ns:
        if int(n) < 1:
            raise ValueError(f"--n must be at least 1; got {n}.")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    p = load_preset(preset)
    extractor = FeatureExtractor(**preset_config(p).features.extractor_kwargs())
    store = FeatureStore(workdir / "features")
    if progress:
        progress("source photos: features into the feature store (once)")
    tag = "-full" if full_size else ""
    srcs = prepare_sources(data_dir, store, extractor, workdir / f"sources-{extractor.config_key}{tag}.json",
                           workers=workers, limit=sources, full_size=full_size)
    for n in ns:
        res = bench_one(int(n), preset=preset, workdir=workdir, sources=srcs, store=store,
                        key=extractor.config_key, queries=queries, add_many=add_many, sync_limit=sync_limit,
                        progress=progress, tag=tag, compact_features=compact_features)
        res.update(extract_s_per_photo=srcs["extract_s_per_photo"], source_photos=len(srcs["paths"]),
                   full_size=bool(full_size))
        yield res


if __name__ == "__main__":
    child_main(sys.argv[1:])
