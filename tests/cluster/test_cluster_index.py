"""Indexing and searching on a real Dask cluster: a ``distributed.LocalCluster`` of 2 worker processes on loopback.

A subset of the minibench photos (4 groups of 3 + 2 distractors) plus one unreadable file, at 480 px with a
16-Gaussian model so that the module runs in about a minute on 2 cores. Each test compares against the same
collection indexed by one process (``workers=1``, no cluster): same catalog rows, same ranked lists.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from conftest import shared_path
from helpers import small_spec

distributed = pytest.importorskip("distributed")

from retrieval.app.index import Index  # noqa: E402
from retrieval.engine.paper_presets import apply_overrides  # noqa: E402
from retrieval.engine.presets import load_preset  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW_KEYS = ("id", "path", "hash", "size", "status", "error", "n_features", "width", "height", "orientation")


def preset(**index):
    p = apply_overrides(load_preset("default"), ["features.max_side=480", "aggregation.n_components=16"])
    p["index"].update(index)
    return p


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as c, distributed.Client(c, set_as_default=False) as client:
        yield c, client


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("photos")
    shared_path("minibench.json")
    spec = small_spec(tmp, n_groups=4, n_distractors=2)
    folder = spec.parent
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    queries = [str(folder / g["images"][0]) for g in json.loads(spec.read_text())["groups"]]
    assert len(queries) == 4
    return folder, queries


@pytest.fixture(scope="module")
def reference(tmp_path_factory, photos):
    """The collection indexed by one process, without a cluster."""
    folder, _ = photos
    idx = Index.create(tmp_path_factory.mktemp("ref") / "idx", preset=preset(), train_on="collection")
    report = idx.sync(folder, workers=1)
    assert report.added == 14 and len(report.errors) == 1
    return idx


def restore_workers(cluster, n=2):
    """Back to ``n`` running workers for the next tests after one was killed: the nanny restarts it; one that has
    not come back within 60 s (a loaded machine) is replaced by a new worker."""
    c, client = cluster
    try:
        client.wait_for_workers(n, timeout=60)
    except TimeoutError:
        c.scale(len(c.worker_spec) + 1)
        client.wait_for_workers(n, timeout=120)


def rows(idx):
    return [{k: r[k] for k in ROW_KEYS} for r in sorted(idx.catalog.snapshot()[1], key=lambda r: r["id"])]


def ranked(idx, queries, **kw):
    return [[(h.id, h.path, round(h.score, 6), h.verified, h.inliers) for h in idx.search(q, k=8, **kw)]
            for q in queries]


def assert_same_lists(got, want):
    """The same hits in the same order, verified alike; scores equal up to float32 rounding (a shard's inner
    products of an expanded query are summed over another block of rows than the whole matrix's)."""
    assert [[h[:2] + h[3:] for h in row] for row in got] == [[h[:2] + h[3:] for h in row] for row in want]
    for row_g, row_w in zip(got, want, strict=True):
        assert max((abs(g[2] - w[2]) for g, w in zip(row_g, row_w, strict=True)), default=0) <= 2e-6


def test_cluster_index_equals_single_process(tmp_path, cluster, photos, reference):
    _, client = cluster
    folder, queries = photos
    idx = Index.create(tmp_path / "idx", preset=preset(), train_on="collection")
    report = idx.sync(folder, cluster=client)
    assert report.added == 14
    assert rows(idx) == rows(reference)
    # the unreadable file: an error row with the message the local path gives
    [(path, reason)] = report.errors
    assert path.endswith("broken.jpg")
    assert dict(report.errors) == {p: r for p, r in [(r["path"], r["error"]) for r in rows(reference)
                                                     if r["status"] == "error"]}
    assert ranked(idx, queries) == ranked(reference, queries)
    assert ranked(idx, queries, rerank="none") == ranked(reference, queries, rerank="none")


def test_killed_worker_reruns_its_tasks(tmp_path, cluster, photos, reference):
    c, client = cluster
    folder, queries = photos
    idx = Index.create(tmp_path / "idx", preset=preset(), train_on="collection")
    entries = idx.store.folder
    pids = client.run(os.getpid)
    killed = {}
    synced = threading.Event()

    def kill_when_started():   # once 3 images are in the store, SIGKILL the first worker process
        while not synced.is_set():   # no deadline: however slow the machine, it watches until the sync ends
            n = sum(1 for _ in entries.rglob("*.npz")) if entries.exists() else 0
            if n >= 3:
                pid = pids[sorted(pids)[0]]
                os.kill(pid, signal.SIGKILL)
                killed.update(pid=pid, at=n)
                return
            synced.wait(0.02)

    watcher = threading.Thread(target=kill_when_started)
    watcher.start()
    try:
        report = idx.sync(folder, cluster=client)
    finally:
        synced.set()
        watcher.join()
    assert killed and killed["at"] < 14, killed   # the worker died mid-run
    assert report.added == 14 and len(report.errors) == 1
    assert rows(idx) == rows(reference)
    assert ranked(idx, queries) == ranked(reference, queries)
    restore_workers(cluster)


@pytest.mark.parametrize("name", ["accurate", "object"])
def test_object_presets_extract_and_encode_on_the_cluster_as_one_process(tmp_path, cluster, photos, name):
    """The object presets on the cluster: the workers extract and encode (words, frames, signatures: tasks
    ``encode_task``); the client adds what they return. Same catalog and same ranked lists as one process."""
    _, client = cluster
    folder, queries = photos
    p = apply_overrides(load_preset(name), ["features.max_side=480"])
    one = Index.create(tmp_path / "one", preset=p, train_on="collection")
    one.sync(folder, workers=1)
    idx = Index.create(tmp_path / "idx", preset=p, train_on="collection")
    with distributed.get_task_stream(client) as tasks:
        report = idx.sync(folder, cluster=client)
    assert report.added == 14
    assert any("encode_task" in t["key"] for t in tasks.data)
    assert rows(idx) == rows(one)
    assert ranked(idx, queries) == ranked(one, queries)


@pytest.mark.parametrize("ivfadc", [False, True], ids=["flat", "ivfadc"])
def test_sharded_index_returns_the_unsharded_lists(tmp_path, cluster, photos, reference, ivfadc):
    _, client = cluster
    folder, queries = photos
    over = {"min_images": 8, "nlist": 2, "M": 8, "nbits": 2, "nprobe": 1, "shortlist": 6} if ivfadc else {}
    store = reference.store.folder   # features already extracted: only training and encoding run
    if ivfadc:
        one = Index.create(tmp_path / "s1", preset=preset(**over), train_on="collection", feature_store=store)
        one.sync(folder, workers=1)
    else:
        one = reference   # the same preset, unsharded
    three = Index.create(tmp_path / "s3", preset=preset(**over), train_on="collection", feature_store=store,
                         shards=3)
    three.sync(folder, workers=1)
    gen_dir = three.path / "gens" / f"{three.catalog.snapshot()[0]:08d}"
    assert sorted(p.name for p in gen_dir.glob("shard-*")) == ["shard-000", "shard-001", "shard-002"]
    assert (gen_dir / "shard-000" / "ivfadc").is_dir() == ivfadc
    one = Index.open(one.path)
    want, want_reranked = ranked(one, queries, rerank="none"), ranked(one, queries)
    assert ranked(three, queries, rerank="none") == want   # the writer's view, right after the sync
    fresh = Index.open(three.path)   # searches the shards as stored
    assert ranked(fresh, queries, rerank="none") == want
    assert_same_lists(ranked(fresh, queries), want_reranked)
    fresh.use_cluster(client)   # the shards held by the workers
    assert ranked(fresh, queries, rerank="none") == want
    assert_same_lists(ranked(fresh, queries), want_reranked)


def test_shards_need_a_shardable_preset(tmp_path):
    with pytest.raises(ValueError, match="preset 'compact' .*cannot be sharded"):
        Index.create(tmp_path / "idx", preset="compact", shards=2)


def test_unreachable_scheduler_is_one_line_and_exit_1(tmp_path, photos):
    folder, _ = photos
    import socket

    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the CLI gives up at once, on the first cause (a refused connection, an address that is not one), not after
    # the connection timeout or Dask's retries: the line names that cause (the timeout below only guards against
    # a hang; the run itself is the start of a Python process)
    for address, cause in ((f"tcp://127.0.0.1:{port}", "(Connection refused)"),
                           ("not-an-address", "expected a Dask scheduler address tcp://HOST:PORT")):
        proc = subprocess.run([sys.executable, "-m", "retrieval.cli", "index", str(folder), "--index",
                               str(tmp_path / "idx"), "--cluster", address], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and address in lines[0] and "Dask scheduler" in lines[0], proc.stderr
        assert cause in lines[0] and "no answer within" not in lines[0], lines[0]
        assert not (tmp_path / "idx").exists()   # nothing was created


def test_a_silent_address_gives_up_through_the_connect_timeout():
    """A listener that accepts the connection and never speaks (a firewall, a stuck service): ``connect`` gives up
    through its own timeout, one line naming the TimeoutError, even with Dask's connect timeout set to an hour (so
    it does not rely on Dask's). The deadline of the wait below only guards against a hang; the time taken is not
    asserted (scheduler timing on a loaded machine)."""
    import socket

    import dask

    from retrieval.app.cluster import ClusterError, connect

    outcome = {}

    def attempt():
        try:
            connect(address, timeout=0.5)
            outcome["error"] = None
        except ClusterError as exc:
            outcome["error"] = str(exc)

    with socket.socket() as silent, dask.config.set({"distributed.comm.timeouts.connect": "3600s"}):
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)   # connections complete in the backlog; nothing ever answers them
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        worker = threading.Thread(target=attempt, daemon=True)
        worker.start()
        worker.join(300)
        assert not worker.is_alive(), f"connect({address!r}, timeout=0.5) is still waiting after 300 s"
    assert outcome["error"] is not None and "\n" not in outcome["error"], outcome
    assert address in outcome["error"] and "no Dask scheduler answers there (TimeoutError" in outcome["error"], outcome


def test_worker_task_reads_an_fsspec_url(tmp_path, photos):
    """What a worker runs for one image given as an fsspec URL (here fsspec's in-memory filesystem, so the task is
    called in this process): the same features as from the file, written to the store."""
    import fsspec

    from retrieval.app.cluster import extract_task
    from retrieval.features.store import FeatureStore, file_hash

    folder, queries = photos
    ex = reference_extractor()
    url = "memory://bucket/photo.jpg"
    with fsspec.open(url, "wb") as fh:
        fh.write(open(queries[0], "rb").read())
    h = file_hash(queries[0])
    assert extract_task(url, h, ex, str(tmp_path / "store")) == ("ok", len(ex(queries[0])))
    got = FeatureStore(tmp_path / "store").get(h, ex.config_key)
    want = ex(queries[0])
    assert (got.descriptors == want.descriptors).all() and (got.frames == want.frames).all()
    assert extract_task("memory://bucket/missing.jpg", h + "0", ex, str(tmp_path / "store"))[0] == "error"


def reference_extractor():
    from retrieval.engine.presets import preset_config
    from retrieval.features import FeatureExtractor

    return FeatureExtractor(**preset_config(preset()).features.extractor_kwargs())


def test_cli_index_and_query_with_cluster_and_shards(tmp_path, cluster, photos, reference):
    """`retrieval index --cluster --shards 2` then `retrieval query --cluster --json`: the reference's lists."""
    from click.testing import CliRunner

    from retrieval.cli.main import main

    c, _ = cluster
    folder, queries = photos
    spec = tmp_path / "preset.json"
    spec.write_text(json.dumps(preset()))
    idx_dir = str(tmp_path / "idx")
    address = c.scheduler_address
    res = CliRunner().invoke(main, ["index", str(folder), "--index", idx_dir, "--preset", str(spec), "--train-on",
                                    "collection", "--cluster", address, "--shards", "2", "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    assert Index.open(idx_dir).catalog.get_meta("shards") == 2
    for q in queries[:2]:
        res = CliRunner().invoke(main, ["query", q, "--index", idx_dir, "--top", "8", "--json", "--cluster", address])
        assert res.exit_code == 0, res.output
        got = [(h["id"], h["path"], h["score"], h["verified"], h.get("inliers")) for h in json.loads(res.stdout)]
        assert_same_lists([got], ranked(Index.open(reference.path), [q]))
    # a worker holding shards is lost between two queries: the next query loads the shards again
    _, client = cluster
    idx = Index.open(idx_dir)
    idx.use_cluster(client)
    want = ranked(idx, queries[:1], rerank="none")
    pids = client.run(os.getpid)
    os.kill(pids[sorted(pids)[0]], signal.SIGKILL)
    assert ranked(idx, queries[:1], rerank="none") == want
    restore_workers(cluster)


def test_served_sharded_index_searches_its_shards_on_the_cluster(tmp_path, cluster, photos, reference):
    """'retrieval serve --cluster': a sharded index served with its shards held by the workers answers an HTTP
    search with the unsharded index's list."""
    import httpx
    from web.web_support import ServerThread

    _, client = cluster
    folder, queries = photos
    three = Index.create(tmp_path / "s3", preset=preset(), train_on="collection",
                         feature_store=reference.store.folder, shards=3)
    three.sync(folder, workers=1)
    server = ServerThread(three.path, cluster=client)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for q in queries[:2]:
                qid = Index.open(three.path).catalog.row_by_path(str(q))["id"]
                body = http.post("/api/search", data={"id": qid, "k": 8, "rerank": "none"}).json()
                want = ranked(reference, [q], rerank="none")[0]
                assert [(h["path"], h["score"]) for h in body["hits"]] == [(h[1], h[2]) for h in want]
        assert server.service.index.search_client is client
    finally:
        server.stop()


def test_bench_scale_keeps_dask_quiet_without_verbose():
    """Dask's scheduler and worker processes log INFO lines of their own (their own format); without ``-v`` the
    command's stderr has none of them, with ``-v`` they come back."""
    minibench = shared_path("minibench.json")

    def stderr_of(*flags):
        res = subprocess.run([sys.executable, "-m", "retrieval.cli", *flags, "bench", "scale", "--images", "2",
                              "--skip-search", "--json", "--minibench", str(minibench)],
                             capture_output=True, text=True, timeout=300,
                             env={k: v for k, v in os.environ.items() if not k.startswith("DASK_")})
        assert res.returncode == 0, res.stderr[-2000:]
        return [ln for ln in res.stderr.splitlines() if " - INFO - " in ln or ln.startswith("INFO")]

    assert stderr_of() == []
    assert stderr_of("-v") != []
