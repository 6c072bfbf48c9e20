"""``retrieval bench cli``: the wall time of cold ``retrieval query`` commands, each a new process, as a person
running the command sees it (interpreter start, imports, opening the index, the search, printing).

The indexes are built once (``retrieval index --workers 1`` with a shared feature store) when they are not there
yet. The queries are indexed photos (of the first preset's index) given by path, evenly spread over the folder; each is run once per preset,
presets interleaved so that a change in machine load touches them alike.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "retrieval.cli", *map(str, args)]


def _env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _timed(cmd, env) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr.strip()[-500:]}")
    return dt


def _summary(times: list[float]) -> dict:
    s = sorted(times)
    return {"runs": len(s), "p50_s": round(statistics.median(s), 3), "p90_s": round(s[math.ceil(0.9 * len(s)) - 1], 3),
            "min_s": round(s[0], 3), "max_s": round(s[-1], 3)}


def bench_cli(photos, *, presets=("default", "object"), workdir="bench-cli", feature_store=None, runs: int = 20,
              workers: int = 1, targets=None, progress=None) -> dict:
    """Cold-query wall times per preset (see the module doc).

    Parameters
    ----------
    photos : folder of photos (indexed once per preset into ``workdir/index-<preset>``)
    presets : preset names
    feature_store : shared feature-store folder for the index builds (default ``workdir/features``)
    runs : queries timed per preset
    targets : {preset: seconds} — the p50 bounds to report against (default: default 1.0, object 1.5)

    Returns
    -------
    dict with ``photos`` (count), ``startup`` (``retrieval --version`` and ``retrieval query --help``, the fixed
    cost of any command) and ``presets``: {name: {index, images, runs, p50_s, p90_s, min_s, max_s, target_s,
    meets_target}}
    """
    from retrieval.app.index_support import walk_photos

    targets = dict({"default": 1.0, "object": 1.5}, **(targets or {}))
    env = _env()
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = Path(feature_store) if feature_store else work / "features"
    files = walk_photos(photos)
    if not files:
        raise ValueError(f"{photos}: no photos.")
    indexes = {}
    for p in presets:
        idx = work / f"index-{p}"
        if not (idx / "catalog.db").exists():
            subprocess.run(_cli("-q", "index", photos, "--index", idx, "--preset", p, "--feature-store", store,
                                "--workers", workers), env=env, check=True, stdout=subprocess.DEVNULL)
        indexes[p] = idx
    from retrieval.app.index import Index

    indexed = sorted(r["path"] for r in Index.open(indexes[presets[0]]).catalog.snapshot()[1]
                     if r["status"] == "indexed")
    queries = [indexed[int(i * len(indexed) / runs)] for i in range(runs)]
    startup = {"version": [], "query_help": []}
    times = {p: [] for p in presets}
    for n, q in enumerate(queries):
        startup["version"].append(_timed(_cli("--version"), env))
        startup["query_help"].append(_timed(_cli("query", "--help"), env))
        for p in presets:
            times[p].append(_timed(_cli("query", q, "--index", indexes[p], "--format", "json"), env))
        if progress is not None:
            progress(n + 1, len(queries))
    out = {"photos": len(files), "startup": {k: _summary(v) for k, v in startup.items()}, "presets": {}}
    for p in presets:
        s = _summary(times[p])
        t = targets.get(p)
        out["presets"][p] = {"index": str(indexes[p]), **s, "target_s": t,
                             "meets_target": None if t is None else s["p50_s"] < t}
    return out
