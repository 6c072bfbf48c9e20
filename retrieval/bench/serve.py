"""Load test of ``retrieval serve``, run by ``retrieval bench serve``.

An index of the first N real photos (Holidays-805, then UKBench-400) is built once (``WORKDIR/base-<preset>``, reused
when complete) and copied for each run. The server runs in its own process (``retrieval serve --port 0``); C client
threads send whole-image searches by indexed id over keep-alive HTTP connections while, in a third process,
``retrieval index EXTRA --add-root`` adds the next images and publishes a new generation.

Every answer is checked against the catalog: its generation must be one that was published (the one before or the
one after the sync), every hit must be an image of THAT generation with its catalog path (no half-published
result), and a search sent after the sync finished must answer from the new generation (no stale result). Latency = request sent to answer read, at the client.
The server is stopped by SIGTERM at the end, and must exit 0 saying so in one line (``server_stop``).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from retrieval.app.index import Index


def photo_lists(data_dir, n_images: int, n_add: int) -> tuple[list[Path], list[Path]]:
    """The first ``n_images`` photos of Holidays-805 then UKBench-400 (sorted), and the next ``n_add``."""
    data = Path(data_dir) / "real"
    files = sorted((data / "holidays805" / "jpg").glob("*.jpg")) + sorted((data / "ukbench400").glob("*.jpg"))
    if len(files) < n_images + n_add:
        raise ValueError(f"{data}: {len(files)} photos in holidays805/jpg and ukbench400, fewer than the "
                         f"{n_images} + {n_add} asked for.")
    return files[:n_images], files[n_images:n_images + n_add]


def _link_folder(folder: Path, files: list[Path], start: int) -> None:
    """``folder`` holds exactly symbolic links ``<number>_<name>`` to ``files`` (recreated when different)."""
    want = {f"{start + i:04d}_{f.name}": f.resolve() for i, f in enumerate(files)}
    if folder.is_dir():
        have = {p.name: p.resolve() for p in folder.iterdir()}
        if have == want:
            return
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, target in want.items():
        (folder / name).symlink_to(target)


def base_index(workdir: Path, photos: Path, n: int, preset: str, feature_store, workers, progress) -> Path:
    """The base index of ``photos`` (built once; reused when it holds ``n`` indexed images of that folder, with
    their features in its feature store)."""
    base = workdir / f"base-{preset}"
    if (base / "catalog.db").exists():
        idx = Index.open(base)
        rows = [r for r in idx.catalog.rows() if r["status"] == "indexed"]
        # the stored features must still be there (a feature store given on an earlier run may be gone: every
        # verification would then extract the image again)
        ok = (idx.roots == [str(photos.resolve())] and len(rows) == n
              and all((r["hash"], idx.extractor.config_key) in idx.store for r in rows))
        idx.close()
        if ok:
            return base
        shutil.rmtree(base)
    idx = Index.create(base, preset=preset, feature_store=feature_store)
    report = idx.sync(photos, workers=workers, progress=progress)
    idx.close()
    if report.errors:
        raise RuntimeError(f"{len(report.errors)} photo(s) could not be indexed, e.g. {report.errors[0]}")
    return base


def _drain(stream, log: Path) -> None:
    """Copy the server's stderr to ``log`` line by line (keeps the pipe drained; the log outlives the run)."""
    with open(log, "a", encoding="utf-8") as fh:
        for line in stream:
            fh.write(line)
            fh.flush()


def _start_server(index: Path, threads, log: Path) -> tuple[subprocess.Popen, int, threading.Thread]:
    cmd = [sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index), "--port", "0"]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    line = proc.stderr.readline()
    if "http://" not in line:
        proc.kill()
        raise RuntimeError(f"'retrieval serve' did not start: {line.strip()} {proc.stderr.read()[-500:]}")
    port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    log.write_text(line, encoding="utf-8")
    drain = threading.Thread(target=_drain, args=(proc.stderr, log), daemon=True)
    drain.start()
    return proc, port, drain


def _stop_server(proc: subprocess.Popen, drain: threading.Thread, log: Path) -> dict:
    """Stop the server as a service manager does (SIGTERM: it answers the requests in progress, then exits 0 with
    one line); its exit status and last line (killed after 120 s: -9)."""
    proc.terminate()
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    drain.join(timeout=10)
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return {"exit_status": proc.returncode, "said": lines[-1] if lines else ""}


def _search(conn: http.client.HTTPConnection, image_id: int, k: int, rerank: str | None = None) -> tuple[int, dict]:
    boundary = "retrievalbench"
    fields = [("id", image_id), ("k", k)] + ([("rerank", rerank)] if rerank else [])
    body = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{n}"\r\n\r\n{v}\r\n'
                   for n, v in fields) + f"--{boundary}--\r\n"
    conn.request("POST", "/api/search", body=body.encode(),
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def _wait_ready(port: int, image_id: int, timeout: float = 300.0) -> None:
    t0 = time.time()
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, _ = _search(conn, image_id, 1)
            conn.close()
            if status == 200:
                return
        except OSError:
            pass
        if time.time() - t0 > timeout:
            raise RuntimeError(f"the server on port {port} did not answer a search within {timeout:.0f} s")
        time.sleep(0.5)


def bench_serve(data_dir, *, workdir, n_images=1000, n_add=100, searches=1000, clients=8, threads=None,
                preset="default", feature_store=None, workers=None, k=10, rerank=None, progress=False,
                seed=0) -> dict:
    """Run the load test (module docstring); returns the figures as a JSON-able dict."""
    workdir = Path(workdir).resolve()
    first, extra = photo_lists(data_dir, n_images, n_add)
    photos, extra_dir = workdir / "photos", workdir / "extra"
    _link_folder(photos, first, 0)
    _link_folder(extra_dir, extra, n_images)
    t0 = time.perf_counter()
    base = base_index(workdir, photos, n_images, preset, feature_store, workers, progress)
    build_seconds = time.perf_counter() - t0
    run = workdir / "run-index"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(base, run, ignore=shutil.ignore_patterns("thumbs", "uploads", ".lock"))
    idx = Index.open(run)
    gen0, rows0 = idx.catalog.snapshot()
    paths = {gen0: {r["id"]: r["path"] for r in rows0 if r["status"] == "indexed"}}
    ids = np.array(sorted(paths[gen0]))
    order = np.random.default_rng(seed).choice(ids, size=searches, replace=len(ids) < searches)

    server_log = workdir / "server.log"
    server, port, drain = _start_server(run, threads, server_log)
    results: list[tuple] = []
    sync = {}
    try:
        _wait_ready(port, int(ids[0]))
        lock = threading.Lock()
        next_i = [0]

        def client():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            while True:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= searches:
                    break
                t = time.perf_counter()
                try:
                    status, body = _search(conn, int(order[i]), k, rerank)
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    status, body = -1, {"error": f"{type(exc).__name__}: {exc}"}
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                with lock:
                    results.append((t, time.perf_counter() - t, status, body))
            conn.close()

        def syncer():
            while len(results) < searches // 10:   # start once the load is steady
                time.sleep(0.05)
            sync["start"] = time.perf_counter()
            cmd = [sys.executable, "-m", "retrieval.cli", "index", str(extra_dir), "--index", str(run), "--add-root",
                   "--quiet", "--json"] + (["--workers", str(workers)] if workers else [])
            done = subprocess.run(cmd, capture_output=True, text=True)
            sync["end"] = time.perf_counter()
            sync["returncode"], sync["stderr"] = done.returncode, done.stderr[-1000:]

        t_start = time.perf_counter()
        pool = [threading.Thread(target=client) for _ in range(clients)]
        syncing = threading.Thread(target=syncer) if n_add else None
        for th in pool + ([syncing] if syncing else []):
            th.start()
        for th in pool:
            th.join()
        wall = time.perf_counter() - t_start
        if syncing:
            syncing.join()
    finally:
        stop = _stop_server(server, drain, server_log)
    if n_add and sync.get("returncode") != 0:
        raise RuntimeError(f"the concurrent 'retrieval index' failed: {sync.get('stderr')}")
    gen1, rows1 = idx.catalog.snapshot()
    idx.close()
    paths[gen1] = {r["id"]: r["path"] for r in rows1 if r["status"] == "indexed"}

    errors, inconsistent, stale, first_problem, seen = 0, 0, 0, None, {}
    for sent, _, status, body in results:
        if status != 200:
            errors += 1
            first_problem = first_problem or f"HTTP {status}: {body.get('error')} (server log: {server_log})"
            continue
        g = body.get("generation")
        seen[g] = seen.get(g, 0) + 1
        known = paths.get(g)
        bad = known is None or any(known.get(h["id"]) != h["path"] for h in body["hits"]) or not body["hits"]
        if bad:
            inconsistent += 1
            first_problem = first_problem or f"generation {g}: hits {[h['id'] for h in body['hits']][:5]}"
        if n_add and sent > sync["end"] and g != gen1:   # sent after the new generation was published
            stale += 1
            first_problem = first_problem or f"stale: generation {g} answered after {gen1} was published"
    lat = np.array([r[1] for r in results if r[2] == 200]) * 1000.0
    service = np.array([r[3]["seconds"] for r in results if r[2] == 200]) * 1000.0
    during = np.array([r[1] for r in results if r[2] == 200 and n_add
                       and sync["start"] <= r[0] <= sync["end"]]) * 1000.0

    def pct(a):
        return {"p50": round(float(np.percentile(a, 50)), 1), "p95": round(float(np.percentile(a, 95)), 1)} \
            if len(a) else {"p50": float("nan"), "p95": float("nan")}

    return {"benchmark": "serve", "preset": preset, "images": n_images, "added": len(paths[gen1]) - len(paths[gen0]),
            "searches": searches, "clients": clients, "k": k, "cpu_count": os.cpu_count(),
            "server_threads": threads or os.cpu_count(), "errors": errors, "inconsistent": inconsistent, "stale": stale,
            "first_problem": first_problem, "generations_seen": {str(g): n for g, n in sorted(seen.items())},
            "generations_published": [gen0, gen1], "rerank": rerank or "preset",
            "latency_ms": pct(lat), "latency_during_sync_ms": pct(during), "search_ms_in_server": pct(service),
            "searches_during_sync": int(len(during)), "searches_per_s": round(len(results) / wall, 2),
            "sync_seconds": round(sync["end"] - sync["start"], 1) if n_add else 0.0,
            "base_index_seconds": round(build_seconds, 1), "server_log": str(server_log), "server_stop": stop}

