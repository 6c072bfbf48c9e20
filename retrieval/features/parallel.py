"""Parallel extraction over many images with a process pool; results in input order, errors captured per file."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator

from retrieval.core.checks import check_scalar
from retrieval.features.image import ImageReadError
from retrieval.features.store import file_hash
from retrieval.features.types import LocalFeatures

logger = logging.getLogger(__name__)

_WORKER_EXTRACTOR = None


def _init_worker(extractor, single_thread: bool) -> None:
    global _WORKER_EXTRACTOR
    _WORKER_EXTRACTOR = extractor
    # Ctrl-C reaches every process of the terminal's group: the parent stops the pool (ExtractionPool.close);
    # a worker interrupted in the middle of an image would only print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if single_thread:
        try:
            import cv2

            cv2.setNumThreads(1)  # one process per core: no oversubscription inside workers
        except ImportError:  # pragma: no cover
            pass


def _extract_one(path):
    try:
        return _WORKER_EXTRACTOR(path)
    except Exception as exc:  # noqa: BLE001 - every per-file failure is reported to the caller, not raised
        return exc


def extract_many(paths, extractor, workers: int | None = None, progress=None, store=None,
                 chunksize: int = 1) -> Iterator[tuple[int, LocalFeatures | Exception]]:
    """Extract the features of many images; yields ``(i, LocalFeatures | Exception)`` in input order.

    A file that fails (unreadable, too small, ...) yields its exception; the others continue.

    Parameters
    ----------
    paths : sequence of str or Path
    extractor : callable path -> LocalFeatures (e.g. :class:`FeatureExtractor`; must be picklable for workers > 1)
    workers : int or None
        Processes; None = ``os.cpu_count()``; 1 = in this process (no pool).
    progress : callable(done, total) or None
        Called after each image.
    store : FeatureStore or None
        When given, cached features are read from it and new ones written to it (resumable runs).
    chunksize : int
        Paths handed to a worker at a time.
    """
    paths = list(paths)
    total = len(paths)
    if workers is None:
        workers = os.cpu_count() or 1
    check_scalar(workers, "workers", "extract_many", low=1)
    check_scalar(chunksize, "chunksize", "extract_many", low=1)
    results: dict[int, object] = {}
    todo = list(range(total))
    hashes: dict[int, str] = {}
    if store is not None:
        todo = []
        for i, p in enumerate(paths):
            try:
                hashes[i] = file_hash(p)
            except OSError as exc:
                results[i] = ImageReadError(p, f"file not found or unreadable ({exc.strerror or exc})")
                continue
            got = store.get(hashes[i], extractor.config_key)
            if got is None:
                todo.append(i)
            else:
                results[i] = got
    done = 0
    next_out = 0

    def drain():
        nonlocal next_out
        while next_out < total and next_out in results:
            yield next_out, results.pop(next_out)
            next_out += 1

    def record(i, res):
        nonlocal done
        if store is not None and isinstance(res, LocalFeatures):
            store.put(hashes[i], res, extractor.config_key)
        if isinstance(res, Exception):
            logger.debug("extraction failed: %s", res)  # callers report failures (once)
        results[i] = res
        done += 1
        if progress is not None:
            progress(done + (total - len(todo)), total)

    if progress is not None and total - len(todo):
        progress(total - len(todo), total)
    yield from drain()
    if workers == 1 or len(todo) <= 1:
        for i in todo:
            try:
                res = extractor(paths[i])
            except Exception as exc:  # noqa: BLE001 - reported per file
                res = exc
            record(i, res)
            yield from drain()
        return
    with ExtractionPool(extractor, min(workers, len(todo))) as pool:
        for i, res in zip(todo, pool.imap([paths[i] for i in todo], chunksize=chunksize), strict=True):
            record(i, res)
            yield from drain()


class ExtractionPool:
    """A process pool whose workers hold one extractor; reusable across batches (no start-up per batch).

    ``with ExtractionPool(extractor, workers) as pool: for res in pool.imap(paths): ...`` yields, in input
    order, ``LocalFeatures`` or the exception raised for that file. Workers are started with ``forkserver``
    (``spawn`` on Windows): forking a process that already runs OpenCV threads can hang the child.
    """

    def __init__(self, extractor, workers: int | None = None):
        self.extractor = extractor
        self.workers = workers or os.cpu_count() or 1
        check_scalar(self.workers, "workers", "ExtractionPool", low=1)
        self._pool = None

    def __enter__(self) -> ExtractionPool:
        import multiprocessing as mp

        ctx = mp.get_context("spawn" if os.name == "nt" else "forkserver")
        self._pool = ctx.Pool(self.workers, initializer=_init_worker, initargs=(self.extractor, True))
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def imap(self, paths, chunksize: int = 1):
        """Features (or exceptions) of ``paths`` in input order."""
        if self._pool is None:
            raise ValueError("ExtractionPool is not started: use it in a 'with' block.")
        return self._pool.imap(_extract_one, [str(p) for p in paths], chunksize=chunksize)

    def warm_up(self, path) -> None:
        """Run one extraction per worker (imports and library initialisation happen outside timings)."""
        list(self.imap([path] * self.workers))
