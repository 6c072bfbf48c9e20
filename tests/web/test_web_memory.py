"""Decoding bounded by memory, measured on a server in its own process (``retrieval serve --max-decode-mb``):
4 concurrent uploads of a 12001 x 12000 RGBA PNG (700 KB on the wire, 0.6 GB to decode: its full decode, converted
to gray band by band; 2.6 GB when it was converted in one piece) and 2 of a 16-bit gray one (0.3 GB) while searches
by id go on. Each upload is served within the budget (413 when over the per-image limit, from its header); the server's peak RSS (VmHWM in /proc) stays under its RSS before the uploads
plus the budget, and the searches keep answering."""

from __future__ import annotations

import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from helpers import copy_index
from web_support import ServeProcess, web_base  # noqa: F401

BUDGET_MB = 4500   # per image: half, 2,250 MB: both images are under it (retrieval.features.decode_plan)


def proc_status(pid: int, key: str) -> int:
    text = open(f"/proc/{pid}/status").read()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1)) << 10


def huge_pngs(folder):
    """(RGBA PNG 12001 x 12000, 16-bit gray PNG 12000 x 12000), mostly flat (small files). The RGBA sides share no
    factor, so that it is decoded in full (a reduced decode would cost half as much and fit)."""
    from PIL import Image

    a = np.zeros((12000, 12001, 4), np.uint8)
    a[::7, ::5] = 200
    rgba = folder / "huge_rgba.png"
    Image.fromarray(a, "RGBA").save(rgba, compress_level=6)
    del a
    g = np.zeros((12000, 12000), np.uint16)
    g[::3, ::11] = 60000
    g16 = folder / "huge_g16.png"
    Image.fromarray(g).save(g16, compress_level=6)
    return rgba, g16


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's memory from /proc (Linux)")
def test_large_decodes_stay_within_the_budget_and_searches_go_on(web_base, tmp_path):  # noqa: F811
    _, base, _ = web_base
    index = copy_index(base, tmp_path / "index")
    rgba, g16 = huge_pngs(tmp_path)
    server = ServeProcess(index, "--threads", "6", "--max-upload-mb", "5", "--max-decode-mb", str(BUDGET_MB))
    proc, url = server.proc, server.url
    try:
        ids = [im["id"] for im in server.client.get("/api/images").json()["images"]]
        for i in ids[:4]:   # warm: the model, the searcher, the thumbnails' code paths
            assert server.client.post("/api/search", data={"id": i, "k": 5}).status_code == 200
        before = proc_status(proc.pid, "VmRSS")
        latencies, errors = [], []
        stop = threading.Event()

        def searches():
            with httpx.Client(base_url=url, timeout=300) as c:
                j = 0
                while not stop.is_set():
                    t0 = time.perf_counter()
                    r = c.post("/api/search", data={"id": ids[j % len(ids)], "k": 5})
                    latencies.append(time.perf_counter() - t0)
                    if r.status_code != 200:
                        errors.append(r.text)
                    j += 1

        def upload(path):
            with httpx.Client(base_url=url, timeout=300) as c, open(path, "rb") as fh:
                r = c.post("/api/search", files={"image": (path.name, fh.read())}, data={"k": "5"})
                return path.name, r.status_code, r.json()

        searcher = threading.Thread(target=searches)
        searcher.start()
        with ThreadPoolExecutor(6) as ex:
            answers = list(ex.map(upload, [rgba] * 4 + [g16] * 2))
        stop.set()
        searcher.join()
        peak = proc_status(proc.pid, "VmHWM")
        after = proc_status(proc.pid, "VmRSS")
        for name, status, body in answers:
            assert status == 200 and body["hits"], (name, body)
        budget = BUDGET_MB << 20
        assert peak <= before + budget, (peak >> 20, before >> 20)
        assert after <= before + budget // 4, (after >> 20, before >> 20)   # the decodes' memory was handed back
        assert not errors and len(latencies) >= 3
        p50 = float(np.median(latencies))
        print(f"\nRSS before {before >> 20} MB, peak {peak >> 20} MB (budget {BUDGET_MB} MB), after {after >> 20} MB; "
              f"{len(latencies)} searches meanwhile, p50 {p50 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms")
    finally:
        server.stop()
