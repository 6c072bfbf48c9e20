"""The decode budget under the uploads that broke it, on a server in its own process (``retrieval serve
--max-decode-mb 2000``): four 16383 x 9000 WebPs (550 KB each on the wire, 2.2 GB each to decode) and two
12000 x 12000 RGBA PNGs (0.55 GB each to decode, band by band) searched at once, then added at once. Every request
is answered (200 / 201, or 413 from the header), the server's peak RSS (VmHWM in /proc) stays under its resting RSS
+ the budget + 300 MB (the searches' own memory), the thumbnails of every image it accepted are served, and it is
alive at the end. Slow (a minute or two: two 144-megapixel decodes per add): ``--runslow``; the figures it prints
are in docs/benchmarks.md ("Application: decoding within the budget")."""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from helpers import copy_index
from web_support import ServeProcess, web_base  # noqa: F401

BUDGET_MB = 2000
SLACK_MB = 300


def proc_status(pid: int, key: str) -> int:
    text = open(f"/proc/{pid}/status").read()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1)) << 10


def huge_files(folder):
    """(WebP 16383 x 9000 lossy, [RGBA PNG 12000 x 12000] x 2 of different content), mostly flat (small files)."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (16383, 9000), (90, 120, 150))
    draw = ImageDraw.Draw(im)
    for k, x in enumerate(range(0, 16000, 900)):   # shapes on a flat ground: half a megabyte of WebP
        y = 500 + (k % 7) * 500
        draw.rectangle((x, y, x + 400, y + 2500 + (k % 5) * 700), fill=(200, (k * 37) % 255, 40))
        draw.ellipse((x, 6000, x + 700, 8000), fill=(30, 200, (k * 53) % 255))
    webp = folder / "huge.webp"
    im.save(webp, quality=40, method=0)
    del im, draw
    pngs = []
    for seed in (1, 2):
        a = np.zeros((12000, 12000, 4), np.uint8)
        a[::7, ::5] = 200
        a[::11 * seed, :, 3] = 255
        pngs.append(folder / f"huge_rgba_{seed}.png")
        Image.fromarray(a, "RGBA").save(pngs[-1], compress_level=6)
        del a
    return webp, pngs


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's memory from /proc (Linux)")
def test_huge_uploads_at_once_stay_within_the_budget_and_every_accepted_photo_is_shown(web_base, tmp_path):  # noqa: F811
    _, base, _ = web_base
    index = copy_index(base, tmp_path / "index")
    webp, pngs = huge_files(tmp_path)
    server = ServeProcess(index, "--threads", "6", "--max-upload-mb", "5", "--max-decode-mb", str(BUDGET_MB))
    proc, url = server.proc, server.url
    try:
        ids = [im["id"] for im in server.client.get("/api/images").json()["images"]]
        for i in ids[:4]:   # warm: the model, the searcher, the thumbnails' code paths
            assert server.client.post("/api/search", data={"id": i, "k": 5}).status_code == 200
            assert server.client.get(f"/api/images/{i}/thumbnail").status_code == 200
        resting = proc_status(proc.pid, "VmRSS")
        files = [webp] * 4 + pngs

        def send(route, path):
            t0 = time.perf_counter()
            with httpx.Client(base_url=url, timeout=600) as c:
                r = c.post(route, files={"image": (path.name, path.read_bytes())}, data={"k": "5"})
            return path.name, r.status_code, r.json(), time.perf_counter() - t0

        answers = {}
        for route in ("/api/search", "/api/images"):
            with ThreadPoolExecutor(len(files)) as ex:
                answers[route] = list(ex.map(lambda p, route=route: send(route, p), files))
        accepted = [body["image"]["id"] for _, status, body, _ in answers["/api/images"] if status in (200, 201)]
        thumbs = []
        for image_id in accepted:
            for size in ("small", "large"):
                t0 = time.perf_counter()
                r = server.client.get(f"/api/images/{image_id}/thumbnail", params={"size": size})
                thumbs.append((image_id, size, r.status_code, time.perf_counter() - t0))
        peak = proc_status(proc.pid, "VmHWM")
        alive = server.client.get("/api/info").status_code
        after = proc_status(proc.pid, "VmRSS")
    finally:
        server.stop()
    lines = [f"resting RSS {resting >> 20} MB, peak {peak >> 20} MB (+{(peak - resting) >> 20} MB; budget "
             f"{BUDGET_MB} MB + {SLACK_MB}), after {after >> 20} MB"]
    for route, rows in answers.items():
        lines += [f"{route} {name}: {status} in {seconds:.1f} s" + (f" ({body['error']})" if status >= 400 else "")
                  for name, status, body, seconds in rows]
    lines += [f"thumbnail {image_id} {size}: {status} in {seconds:.1f} s" for image_id, size, status, seconds in thumbs]
    print("\n" + "\n".join(lines))
    for route, rows in answers.items():
        for name, status, body, _ in rows:
            assert status in ((200, 413) if route == "/api/search" else (200, 201, 413)), (route, name, body)
            if status == 413:
                assert set(body) == {"error"} and "MB to decode" in body["error"], body
    assert len(accepted) == len(pngs)   # both PNGs fit the per-upload limit; the WebPs do not
    assert thumbs and all(status == 200 for _, _, status, _ in thumbs), thumbs
    assert peak <= resting + ((BUDGET_MB + SLACK_MB) << 20), (peak >> 20, resting >> 20)
    assert alive == 200
