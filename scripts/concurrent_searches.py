"""Concurrent searches through the server's code path, compared with the same searches run alone.

A `compact` index of 20 photos (the demo photos and their views, 240 px) is served by
:class:`retrieval.web.service.Service`; 1,200 searches by id (`rerank=none`, k = 10) are sent from 8 threads
through its search pool, and each answer is compared with the answer of the same search run alone. Uses the
service's public methods only, so it measures any version (run with ``PYTHONPATH`` pointing at another checkout):

    python scripts/concurrent_searches.py /tmp/conc
"""

from __future__ import annotations

import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import make_pool  # noqa: E402

from retrieval.app.index import Index  # noqa: E402
from retrieval.web.service import Service  # noqa: E402


def main(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    pool = make_pool(root / "pool", side=240)
    idx = Index.create(root / "idx", "compact")
    idx.sync(pool[:20], workers=1)
    idx.close()
    svc = Service(root / "idx", workers=8)
    ids = [r["id"] for r in Index.open(root / "idx").catalog.rows()]
    alone = {i: svc.pool.submit(svc.search, image_id=i, k=10, rerank="none").result()["hits"] for i in ids}

    def one(j):
        i = ids[j % len(ids)]
        try:
            return svc.pool.submit(svc.search, image_id=i, k=10, rerank="none").result()["hits"] != alone[i]
        except Exception as exc:  # noqa: BLE001 - counted and reported
            return f"error {type(exc).__name__}"

    with ThreadPoolExecutor(8) as ex:
        out = list(ex.map(one, range(1200)))
    print("differ:", sum(o is True for o in out), "errors:", sum(isinstance(o, str) for o in out), "of", len(out))
    svc.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
