"""Running an index's extraction and a sharded index's search on a Dask cluster (``dask.distributed``).

``retrieval index PHOTO_DIR --cluster ADDRESS`` (or ``RETRIEVAL_DASK_SCHEDULER``) connects a
:class:`distributed.Client` to the scheduler with :func:`connect`; :meth:`retrieval.app.index.Index.sync` then hands
the images to extract to :func:`extract_on_cluster`: tasks of one to 256 images, run by workers that read each image by
its path (a shared filesystem) or by any fsspec URL, write the features into the index's feature store (which the
workers must reach at the same path) and return only a status per image. The catalog stays on the client and is
committed in one transaction, as without a cluster. A worker lost mid-run only loses its unfinished tasks:
the scheduler re-runs them on the other workers; a task finding its entry already in the store returns at once.

Training gathers its sample through the same tasks (the features of the training images are computed on the
workers and read back from the store), then trains on the client. A global preset's vectors are then encoded by the
workers (:func:`encode_on_cluster`: the model loaded once per worker from the index's ``model/`` folder), which also
return each image's feature count and size for the catalog; so are an object preset's words, frames and
signatures, which the client adds as they are.

Search on a cluster: :class:`RemoteShards` loads each shard of a sharded index (:mod:`retrieval.app.shards`) on a
worker from the shared index folder and keeps it in that worker's memory; a query is one small task per shard
returning its top candidates, merged on the client.

Dask is imported lazily: nothing here is loaded by an index that does not use a cluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator

from retrieval.core.checks import ParamError

SCHEDULER_ENV = "RETRIEVAL_DASK_SCHEDULER"
"""Environment variable read when ``--cluster`` is not given."""

CONNECT_TIMEOUT = 4.0
"""Seconds allowed to reach the scheduler before :func:`connect` gives up."""

logger = logging.getLogger(__name__)


class ClusterError(ParamError):
    """The scheduler cannot be reached, or the cluster has no worker: a refused ``cluster`` address (one line
    naming it)."""

    def __init__(self, address, template: str, **facts):
        super().__init__("cluster", address, template=template, **facts)


class RemoteExtractionError(Exception):
    """A worker could not read or describe an image; ``reason`` is the message the local path would give."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _require_distributed():
    try:
        import distributed
    except ImportError:  # pragma: no cover - depends on the installation
        raise ClusterError(None, "{cluster} needs dask.distributed: pip install 'retrieval[cluster]'.") from None
    return distributed


def connect(address: str, timeout: float = CONNECT_TIMEOUT):
    """A :class:`distributed.Client` connected to the scheduler at ``address`` (``tcp://host:port`` or
    ``host:port``), or :class:`ClusterError` with one line within about ``timeout`` seconds."""
    distributed = _require_distributed()
    address = str(address).strip()
    if not address:
        raise ClusterError(address, "{cluster}: empty scheduler address (expected tcp://HOST:PORT).")
    host_port = address.split("://", 1)[-1]
    if ":" not in host_port or not host_port.rsplit(":", 1)[1].isdigit():
        raise ClusterError(address, "{cluster} {value!r}: expected a Dask scheduler address tcp://HOST:PORT.")
    host, port = host_port.rsplit(":", 1)
    try:   # a plain TCP connection first: a refused or unreachable address fails at once, not after retries
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        why = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ClusterError(address, "{cluster} {value}: cannot reach a Dask scheduler there ({why}).",
                           why=why) from None
    try:   # then Dask's handshake: whatever else answers there fails here, before a Client is made
        asyncio.run(_probe(distributed, address, timeout))
    except Exception as exc:  # noqa: BLE001 - not a Dask scheduler: one line
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        raise ClusterError(address, "{cluster} {value}: no Dask scheduler answers there ({why}).",
                           why=type(exc).__name__ + (": " + first if first else "")) from None
    quiet = [logging.getLogger(n) for n in ("distributed", "distributed.client", "distributed.comm.core")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(logging.CRITICAL)
    try:
        client = distributed.Client(address, timeout=f"{timeout}s", set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - whatever answers there is not a Dask scheduler: one line
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ClusterError(address, "{cluster} {value}: no Dask scheduler answers there within {timeout:g} s "
                           "({why}).", timeout=timeout, why=f"{type(exc).__name__}: {first}") from None
    finally:
        for lg, lv in zip(quiet, levels, strict=True):
            lg.setLevel(lv)
    return client


async def _probe(distributed, address: str, timeout: float) -> None:
    comm = await asyncio.wait_for(distributed.comm.connect(address, timeout=timeout), timeout)
    await comm.close()


def scheduler_address(option: str | None) -> str | None:
    """The ``--cluster`` value, else ``$RETRIEVAL_DASK_SCHEDULER``, else None (no cluster)."""
    return option or os.environ.get(SCHEDULER_ENV) or None


def wait_for_workers(client, timeout: float = 30.0) -> None:
    """Wait until the scheduler has at least one worker (ClusterError naming the address otherwise)."""
    t0 = time.monotonic()
    while not client.scheduler_info().get("workers"):
        if time.monotonic() - t0 > timeout:
            raise ClusterError(client.scheduler.address, "the Dask scheduler at {value} has no worker after "
                               "{timeout:g} s (start some with 'dask worker {value}').", timeout=timeout)
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------- extraction

_SINGLE_THREADED = False


def _single_threaded() -> None:
    global _SINGLE_THREADED
    if not _SINGLE_THREADED:
        try:
            import cv2

            cv2.setNumThreads(1)  # one task per worker thread: no oversubscription
        except ImportError:  # pragma: no cover
            pass
        _SINGLE_THREADED = True


def _local_copy(url: str):
    """A local file with the bytes of an fsspec URL (``s3://``, ``gs://``, ``http://``...), and its cleanup."""
    import tempfile

    import fsspec

    suffix = os.path.splitext(url)[1]
    fd, tmp = tempfile.mkstemp(suffix=suffix, prefix="retrieval-")
    with os.fdopen(fd, "wb") as out, fsspec.open(url, "rb") as src:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            out.write(chunk)
    return tmp


def extract_task(path: str, content_hash: str, extractor, store_folder: str) -> tuple[str, object]:
    """Run on a worker: extract ``path`` (a file path or an fsspec URL) into the feature store at
    ``store_folder``. Returns ``("ok", n_features)``, or ``("error", reason)`` with the reason the local path
    reports for the same file."""
    from retrieval.features.store import FeatureStore

    _single_threaded()
    store = FeatureStore(store_folder)
    key = extractor.config_key
    if (content_hash, key) in store:  # a re-run task (a lost worker) or an earlier, interrupted run
        return "ok", None
    tmp = None
    try:
        local = path
        if "://" in path and not path.startswith("file://"):
            local = tmp = _local_copy(path)
        elif path.startswith("file://"):
            local = path[len("file://"):]
        feats = extractor(local)
    except Exception as exc:  # noqa: BLE001 - every per-file failure is reported to the client, not raised
        return "error", getattr(exc, "reason", None) or str(exc)
    finally:
        if tmp is not None:
            os.unlink(tmp)
    store.put(content_hash, feats, key)
    return "ok", len(feats)


def extract_batch_task(items, extractor, store_folder: str) -> list[tuple[str, object]]:
    """Run on a worker: :func:`extract_task` for each ``(path, content_hash)`` of ``items``, in order."""
    return [extract_task(p, h, extractor, store_folder) for p, h in items]


def images_per_task(n_images: int, n_workers: int) -> int:
    """Images per extraction task: about 8 tasks per worker (a lost worker costs little, the load stays balanced),
    at most 256 images per task (the scheduler handles a few hundred to a few thousand tasks per second,
    docs/benchmarks.md: one task per image would make it the bottleneck of a large cluster)."""
    return int(min(256, max(1, n_images // (8 * max(1, n_workers)))))


def extract_on_cluster(client, paths, hashes, store, extractor) -> Iterator[tuple[int, object]]:
    """Extract ``paths`` on the cluster's workers into ``store`` (a :class:`FeatureStore` the workers reach at the
    same path); yields ``(i, None)`` once image ``i`` is in the store, ``(i, RemoteExtractionError)`` when it
    could not be read, task by task in completion order (:func:`images_per_task` images per task). Tasks of a
    lost worker are re-run by the scheduler."""
    distributed = _require_distributed()
    wait_for_workers(client)
    folder = str(os.path.abspath(store.folder))
    ext = client.scatter(extractor, broadcast=True, hash=False)
    per = images_per_task(len(paths), len(client.scheduler_info()["workers"]))
    futures = {}
    for a in range(0, len(paths), per):
        items = [(str(p), h) for p, h in zip(paths[a:a + per], hashes[a:a + per], strict=True)]
        fut = client.submit(extract_batch_task, items, ext, folder, key=f"extract-{items[0][1]}-{a}", pure=False,
                            retries=2)
        futures[fut] = a
    for fut in distributed.as_completed(list(futures), loop=client.loop):
        results = fut.result()
        a = futures.pop(fut)
        fut.release()
        for j, (status, value) in enumerate(results):
            yield a + j, (None if status == "ok" else RemoteExtractionError(str(value)))


# ---------------------------------------------------------------------------------------------- encoding

_MODELS: dict = {}


def encode_task(preset: dict, model_dir: str, store_folder: str, key: str, hashes) -> tuple:
    """Run on a worker: the images whose features are in the store encoded with the index's trained model
    (loaded once per worker from ``model_dir``). Returns ``(encoded, [(n_features, (width, height)), ...])``,
    ``encoded`` the global vectors (n, D') float32, or for an object preset each image's ``(forward entry,
    (words, signatures))`` (:meth:`ObjectBackend.encoded <retrieval.engine.object.backend.ObjectBackend.encoded>`)."""
    import json
    from pathlib import Path

    from retrieval.engine.pipeline import make_backend
    from retrieval.features.store import FeatureStore

    _single_threaded()
    info = json.loads((Path(model_dir) / "model.json").read_text("utf-8"))
    backend = _MODELS.get((model_dir, info["id"]))
    if backend is None:
        backend = make_backend(preset)
        backend.load_model(Path(model_dir), info)
        _MODELS.clear()
        _MODELS[(model_dir, info["id"])] = backend
    store = FeatureStore(store_folder)
    feats = []
    for h in hashes:
        f = store.get(h, key)
        if f is None:
            raise ValueError(f"feature-store entry {h} vanished during the sync.")
        feats.append(f)
    meta = [(len(f), tuple(int(v) for v in f.image_size)) for f in feats]
    if backend.kind == "object":
        return [backend.encoded(f) for f in feats], meta
    return backend.encode(feats), meta


def encode_on_cluster(client, preset: dict, model_dir, store, key: str, hashes, progress=None):
    """The global vectors of ``hashes`` (in order) encoded by the cluster's workers (:func:`encode_task`), and
    each image's ``(n_features, (width, height))``; for an object preset, the list of the images' encodings in
    place of the vectors."""
    import numpy as np

    wait_for_workers(client)
    hashes = list(hashes)
    per = images_per_task(len(hashes), len(client.scheduler_info()["workers"]))
    futs = [client.submit(encode_task, preset, str(os.path.abspath(model_dir)), str(os.path.abspath(store.folder)),
                          key, hashes[a:a + per], pure=False, retries=2) for a in range(0, len(hashes), per)]
    parts, meta, done = [], [], 0
    objects = preset.get("kind") == "object"
    for fut in futs:   # in order: the vectors follow the ids
        V, m = fut.result()
        fut.release()
        parts.append(V if objects else np.asarray(V, np.float32))
        meta.extend(m)
        done += len(m)
        if progress:
            progress(done, len(hashes))
    if objects:
        return [e for p in parts for e in p], meta
    return (np.concatenate(parts) if parts else None), meta


# ---------------------------------------------------------------------------------------------- search


class ShardHolder:
    """A Dask actor holding one shard in a worker's memory; its methods run on that worker, called directly by the
    client (not through the scheduler: about 10x less latency per call than a task, docs/benchmarks.md)."""

    def __init__(self, load, preset: dict, folder: str):
        self.shard = load(preset, folder)

    def size(self) -> int:
        return int(len(self.shard.ids))

    def top(self, fn, q, k: int, short: int):
        return fn(self.shard, q, k, short)


class RemoteShards:
    """The shards of one generation of a sharded index, loaded by the workers from the shared index folder and
    held in their memory (one :class:`ShardHolder` actor per shard, spread over the workers)."""

    def __init__(self, client, preset: dict, folders, load, top):
        """``load(preset, folder)`` -> a shard, ``top(shard, q, k, short)`` -> its candidates (module-level
        functions: the workers import them by name)."""
        wait_for_workers(client)
        self.client, self._top = client, top
        self.folders = [str(os.path.abspath(f)) for f in folders]
        workers = sorted(client.scheduler_info()["workers"])
        self._futures = [client.submit(ShardHolder, load, preset, f, actor=True, workers=[workers[i % len(workers)]],
                                       allow_other_workers=True,
                                       key=f"shard-{i}-{uuid.uuid4().hex}", pure=False)
                         for i, f in enumerate(self.folders)]
        with client.as_current():   # the actor proxies call through this client
            self.actors = [f.result() for f in self._futures]
            sizes = [a.size().result() for a in self.actors]
        logger.info("%d shards (%d images) loaded by %d workers", len(sizes), sum(sizes), len(workers))

    def top(self, q, k: int, short: int) -> list:
        """Every shard's candidates for the query vector ``q`` (``top`` run where the shard is held)."""
        with self.client.as_current():
            calls = [a.top(self._top, q, k, short) for a in self.actors]
            return [c.result() for c in calls]

    def close(self) -> None:
        for f in self._futures:
            f.release()
        self._futures, self.actors = [], []
