"""``retrieval serve`` timed by ``retrieval bench library`` (:mod:`retrieval.bench.library`): ``GET /api/info`` and
the photo grid's page over a keep-alive connection to a real server on loopback."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HTTP_REQUESTS = 20


def child_env() -> dict:
    """The environment of a child: this checkout first on PYTHONPATH (children run this code)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _start_server(index: Path, log: Path) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index), "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=child_env())
    line = proc.stderr.readline()
    m = re.search(r"http://[^ ]*:(\d+)/", line)
    if m is None:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"'retrieval serve' did not start: {line.strip()}")

    def drain():
        with open(log, "w", encoding="utf-8") as fh:
            fh.write(line)
            for rest in proc.stderr:
                fh.write(rest)

    threading.Thread(target=drain, daemon=True).start()
    return proc, int(m.group(1))


def http_timings(index: Path, n_images: int, log: Path, requests: int = HTTP_REQUESTS) -> dict:
    """p50 (ms) of ``GET /api/info`` and of ``GET /api/images`` (a page of 60 by cursor, in the middle of the catalog) from
    ``retrieval serve`` on loopback, over keep-alive connections, after one untimed request of each."""
    proc, port = _start_server(index, log)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for _ in range(1200):
            try:
                conn.request("GET", "/api/info")
                resp = conn.getresponse()
                resp.read()
                break
            except OSError:
                conn.close()
                time.sleep(0.1)
        # the page the photo grid asks for: by cursor (keyset), from the middle of the catalog (the cursor read
        # from an untimed page at that offset)
        conn.request("GET", f"/api/images?offset={max(n_images // 2 - 1, 0)}&limit=1")
        resp = conn.getresponse()
        cursor = json.loads(resp.read())["next"]
        out = {}
        for name, url in (("info", "/api/info"), ("page", f"/api/images?after={cursor}&limit=60")):
            times = []
            for r in range(requests + 1):
                t = time.perf_counter()
                conn.request("GET", url)
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"GET {url}: HTTP {resp.status}: {body[:200]!r} (server log: {log})")
                if r:
                    times.append(1000 * (time.perf_counter() - t))
            out[name] = times
            if name == "page":
                out["page_images"] = len(json.loads(body)["images"])
        conn.close()
        return out
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------- one N
