"""Concurrent searches on one shared index, for every bundled preset, while another writer publishes generations.

For each preset, 8 threads run 400 searches on each path (indexed images and a file that is not indexed, whole image and box,
the preset's re-ranking and none) through the server's code path (:class:`retrieval.web.service.Service`, its
search pool) and through :meth:`Index.search_results` from a thread pool, while another thread adds an image and
then removes one (two new generations). Every answer must equal the single-threaded answer of the generation it
reports (computed beforehand on copies of the index taken through the same two changes); no search may fail.
"""

from __future__ import annotations

import random
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import copy_index, make_pool
from PIL import Image

from retrieval.app.index import Index
from retrieval.engine.params import SearchParams
from retrieval.engine.presets import load_preset, missing_pieces

PRESETS = ["default", "compact", "accurate", "object", "object/3-shards"]   # the last: idf weights over 3 shards
N_SEARCHES = 120   # per path
THREADS = 8
K = 6


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("conc") / "pool", side=240)


def box_of(path) -> str:
    with Image.open(path) as im:
        w, h = im.size
    return f"{w * 0.2:.0f},{h * 0.2:.0f},{w * 0.8:.0f},{h * 0.8:.0f}"


def answer(hits) -> list:
    return [h if isinstance(h, dict) else h.to_json() for h in hits]


class World:
    """The index (generation g0), the two changes a writer publishes, and the reference answers of g0, g0 + 1
    and g0 + 2 (single-threaded, on copies that went through the same changes)."""

    def __init__(self, tmp, preset, pool):
        self.base = pool[:14]
        self.extra, self.outside = pool[14], pool[15]
        self.index_dir = tmp / "idx"
        name, _, shards = preset.partition("/")
        idx = Index.create(self.index_dir, name, shards=int(shards.split("-")[0]) if shards else 1)
        idx.sync(self.base)
        self.g0 = idx.catalog.generation()
        by_path = {r["path"]: r for r in idx.catalog.rows()}
        self.removed = by_path[str(self.base[3])]["id"]
        queries = [("id", by_path[str(p)]["id"], p) for p in (self.base[0], self.base[6], self.base[10])]
        queries.append(("file", str(self.outside), self.outside))
        self.variants = [(kind, q, box, rerank) for kind, q, path in queries for box in (None, box_of(path))
                         for rerank in (None, "none")]
        idx.close()
        self.pristine = copy_index(self.index_dir, tmp / "pristine")
        refs = copy_index(self.index_dir, tmp / "refs")
        self.reference = {}
        ref = Index.open(refs)
        for step in range(3):
            if step == 1:
                self.add(ref)
            elif step == 2:
                self.remove(ref)
            gen = ref.catalog.generation()
            assert gen == self.g0 + step
            for v in self.variants:
                self.reference[(gen, v)] = answer(ref.search(v[1], bbox=v[2], k=K, rerank=v[3]))
        ref.close()

    def add(self, idx):
        idx.sync([*self.base, self.extra])

    def remove(self, idx):
        idx.remove([self.removed])

    def fresh(self):
        """The index at generation g0 again (each path starts from the same state)."""
        shutil.rmtree(self.index_dir)
        copy_index(self.pristine, self.index_dir)


def run_concurrently(world, search) -> list:
    """``search(variant) -> (generation, answer)`` on 8 threads, 400 times, while a writer publishes twice."""
    rng = random.Random(0)
    plan = [world.variants[rng.randrange(len(world.variants))] for _ in range(N_SEARCHES)]
    done = [0]
    lock = threading.Lock()
    publish = [threading.Event(), threading.Event()]   # the writer may publish (after N/4, N/2 answers)
    published = [threading.Event(), threading.Event()]   # it has published
    started = [0]
    errors = []

    def task(v):
        with lock:
            started[0] += 1
            n = started[0]
        # the last half of the searches start after the first publish, the last quarter after the second: every run
        # reads the first and the last generation however fast the searches are, and the searches in between run
        # while the writer publishes
        if n > N_SEARCHES // 2:
            published[0].wait(300)
        if n > 3 * N_SEARCHES // 4:
            published[1].wait(300)
        out = search(v)
        with lock:
            done[0] += 1
            if done[0] == N_SEARCHES // 4:
                publish[0].set()
            if done[0] == N_SEARCHES // 2:
                publish[1].set()
        return v, out

    def writer():
        try:
            idx = Index.open(world.index_dir)   # another writer, as 'retrieval index' in another process would be
            publish[0].wait(300)
            world.add(idx)
            published[0].set()
            publish[1].wait(300)
            world.remove(idx)
            published[1].set()
            idx.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            published[0].set()
            published[1].set()

    w = threading.Thread(target=writer)
    w.start()
    with ThreadPoolExecutor(THREADS) as ex:
        results = list(ex.map(task, plan))
    w.join()
    assert not errors, errors
    return results


def without(hits: list, image_id: int) -> list:
    """``hits`` (JSON) without those of ``image_id``, ranked again."""
    return [dict(h, rank=r) for r, h in enumerate((h for h in hits if h["id"] != image_id), 1)]


def check(world, results):
    seen = {}
    for v, (gen, got) in results:
        assert (gen, v) in world.reference, f"generation {gen} was never published"
        want = world.reference[(gen, v)]
        # a search of an older generation still running when the remove commits no longer finds the removed
        # image's row: its hit is dropped (retrieval.app.searcher, "Rows and generations")
        allowed = [want] if gen == world.g0 + 2 else [want, without(want, world.removed)]
        assert got in allowed, f"{v} at generation {gen} differs from its single-threaded answer"
        seen[gen] = seen.get(gen, 0) + 1
    assert world.g0 in seen and world.g0 + 2 in seen, f"the searches read generations {seen}: the writer did not " \
                                                      f"publish twice during the run"


@pytest.mark.parametrize("preset", PRESETS)
def test_concurrent_searches_equal_their_generations_single_threaded_answers(tmp_path, pool, preset):
    name = preset.partition("/")[0]
    if missing_pieces(load_preset(name)):
        pytest.skip(f"preset {name!r} needs pieces this installation lacks: {missing_pieces(load_preset(name))}")
    world = World(tmp_path, preset, pool)

    # 1. Index.search from a thread pool: one Index shared by every thread
    idx = Index.open(world.index_dir)

    def by_index(v):
        res = idx.search_results(v[1], bbox=v[2], k=K, rerank=v[3])
        return res.generation, answer(res.hits)

    check(world, run_concurrently(world, by_index))
    assert idx.catalog.generation() == world.g0 + 2
    idx.close()

    # 2. the server's code path: the service's search pool, as POST /api/search runs it
    from retrieval.web.service import Service

    world.fresh()
    svc = Service(world.index_dir, workers=THREADS)
    try:
        def by_server(v):
            kind, q, box, rerank = v
            args = {"image_id": q} if kind == "id" else {"image_path": q}
            body = svc.pool.submit(svc.search, SearchParams(k=K, rerank=rerank), box=box, **args).result()
            return body["generation"], answer(body["hits"])

        check(world, run_concurrently(world, by_server))
    finally:
        svc.close()
