"""CLI commands of the web front end: serve, bench serve."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import threading

import click

from retrieval.cli.groups import bench, main
from retrieval.cli.options import echo_json, index_dir_of, index_option, json_option, workers_option
from retrieval.cli.scale import cluster_option, open_client
from retrieval.web.connections import BODY_TIMEOUT, HEADER_TIMEOUT, MAX_CONNECTIONS, MIN_RATE


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (port 0: a free port)."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that say they are
    # TCP; with it on, a response written in two parts (headers, body) waited for the client's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@main.command("serve")
@index_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port (0: any free port, printed on stderr).")
@click.option("--token", envvar="RETRIEVAL_TOKEN", default=None, metavar="TOKEN",
              help="Every request must carry this token (Authorization: Bearer TOKEN, or ?token=TOKEN for a browser, "
                   "which then keeps it in a cookie) [default: $RETRIEVAL_TOKEN]; required off loopback.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another name the server answers to (the Host of its URL: a reverse proxy's name, the machine's "
                   "name); repeatable. Requests naming any other host are refused (421) [default: the loopback "
                   "names, or the bound address].")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="Search threads [default: the number of cores].")
@click.option("--max-upload-mb", type=click.FloatRange(0, None, min_open=True), default=20.0, show_default=True,
              help="Larger uploads are refused (413).")
@click.option("--max-megapixels", type=click.FloatRange(0, None, min_open=True), default=None, metavar="MP",
              help="Uploaded images with more pixels are refused (413) [default: the preset's "
                   "features.max_megapixels, 150].")
@click.option("--max-decode-mb", type=click.FloatRange(0, None, min_open=True), default=None, metavar="MB",
              help="Memory that decoding images may take at once; an image needing more than half of it is refused "
                   "(413), the others wait for room [default: a quarter of the machine's memory, 512 to 4096].")
@click.option("--header-timeout", type=click.FloatRange(0, None, min_open=True), default=HEADER_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="A request's headers must arrive within this time; otherwise its connection is closed (408).")
@click.option("--body-timeout", type=click.FloatRange(0, None, min_open=True), default=BODY_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help=f"A request's body must arrive within this time plus one second per {MIN_RATE} bytes received; "
                   f"otherwise its connection is closed (408).")
@click.option("--max-connections", type=click.IntRange(1), default=MAX_CONNECTIONS, show_default=True,
              metavar="N",
              help="Open connections at most (fewer when file descriptors are short: ulimit -n). Past it a new "
                   "connection closes the one idle longest, or is refused (503) when every one has a request in "
                   "progress.")
@cluster_option("Search a sharded index's shards on the workers of the Dask cluster at ADDRESS [default: "
                "$RETRIEVAL_DASK_SCHEDULER]; they read the index folder at the same path.")
@click.pass_context
def serve_cmd(ctx, index_dir, host, port, token, allow_hosts, threads, max_upload_mb, max_megapixels, max_decode_mb,
              header_timeout, body_timeout, max_connections, cluster):
    """Serve the index: a web page (browse the photos, draw a box, see the verified results and their matches)
    and a JSON API (OpenAPI page at /docs).

    Binds to loopback by default. With --token (or $RETRIEVAL_TOKEN) every request must carry the token; binding to
    any other address without one is refused. Searches read the last published generation; an index updated by
    'retrieval index' meanwhile is picked up without a restart.

    Ctrl-C or SIGTERM stops it: the requests in progress are answered first (a second Ctrl-C stops at once), then
    one line says so; exit status 130 after Ctrl-C, 0 after SIGTERM.
    """
    started = []
    try:
        with _sigterm_raises():   # until the server takes the signals over
            stopped = _serve(ctx, index_dir, host, port, token, allow_hosts, threads, max_upload_mb, max_megapixels,
                             max_decode_mb, header_timeout, body_timeout, max_connections, cluster, started)
    except (KeyboardInterrupt, Terminated) as exc:   # before the server took the signals over, or after
        sigint = not isinstance(exc, Terminated)
        name = "by Ctrl-C (SIGINT)" if sigint else "by SIGTERM"
        click.echo(f"{chr(10) if sigint else ''}retrieval serve stopped {name} "   # a new line after the ^C
                   f"{'while starting or stopping' if started else 'before serving'}.", err=True)
        ctx.exit(128 + signal.SIGINT if sigint else 0)
    click.echo(("\n" if stopped.signal == signal.SIGINT else "") + stopped.message(), err=True)
    ctx.exit(stopped.exit_code)


class Terminated(BaseException):
    """SIGTERM before the server took the signals over (raised in the main thread, caught by serve_cmd)."""


def _terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises :class:`Terminated` in the main thread meanwhile (the previous handler restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve(ctx, index_dir, host, port, token, allow_hosts, threads, max_upload_mb, max_megapixels, max_decode_mb,
           header_timeout, body_timeout, max_connections, cluster, started: list):
    if token is not None and not token.strip():
        raise click.ClickException("--token is empty: give a non-empty token (or unset RETRIEVAL_TOKEN).")
    if not is_loopback(host) and not token:
        raise click.ClickException(f"--host {host} is not a loopback address: give --token TOKEN (or set "
                                   f"RETRIEVAL_TOKEN); every request must then carry it.")
    index_dir = index_dir_of(index_dir)
    client = open_client(ctx, cluster)   # a wrong address: one line, exit 1, before anything starts
    from retrieval.cli.options import verification_cache_mb
    from retrieval.web.app import create_app
    from retrieval.web.server import serve
    from retrieval.web.service import Service

    svc = Service(index_dir, workers=threads, max_upload_bytes=int(max_upload_mb * 1e6),
                  max_megapixels=max_megapixels, cluster=client, max_decode_mb=max_decode_mb,
                  verification_cache_mb=verification_cache_mb())
    app = create_app(svc, token=token, host=host, allow_hosts=allow_hosts)
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    click.echo(f"serving {svc.path} on http://{shown}:{actual}/ ({svc.workers} search threads, "
               f"{svc.budget.max_bytes >> 20} MB for decoding images"
               f"{', shards searched on the cluster' if client is not None else ''}"
               f"{', token required' if token else ''}; API docs at /docs); Ctrl-C stops", err=True)
    started.append(True)
    return serve(app, sock, threads=svc.workers, max_connections=max_connections, header_timeout=header_timeout,
                 body_timeout=body_timeout)


@bench.command("serve")
@click.option("--data", "data_dir", default="../shared/data", show_default=True,
              help="Shared data folder (real/holidays805/jpg and real/ukbench400).")
@click.option("--images", "n_images", type=click.IntRange(1), default=1000, show_default=True,
              help="Images of the served index (the first N of Holidays-805 then UKBench-400).")
@click.option("--add", "n_add", type=click.IntRange(0), default=100, show_default=True,
              help="Images added by a concurrent 'retrieval index' during the searches (the next ones).")
@click.option("--searches", type=click.IntRange(1), default=1000, show_default=True,
              help="Whole-image searches by indexed id.")
@click.option("--clients", type=click.IntRange(1), default=8, show_default=True, help="Concurrent clients.")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="Search threads of the server [default: the number of cores].")
@click.option("--preset", default="default", show_default=True, help="Preset of the index.")
@click.option("--rerank", type=click.Choice(["none", "spatial"]), default=None,
              help="Re-ranking of the searches [default: the preset's].")
@click.option("--workdir", default=".cache/bench-serve", show_default=True,
              help="Scratch folder: photo links, the base index (reused when complete) and a copy per run.")
@click.option("--feature-store", default=None, metavar="DIR",
              help="Feature-store folder (default: WORKDIR/features); features are extracted once.")
@workers_option("Extraction processes for building the base index and for the concurrent sync.")
@json_option("Print the result as JSON.")
def bench_serve_cmd(data_dir, n_images, n_add, searches, clients, threads, preset, rerank, workdir, feature_store,
                    workers, as_json):
    """Load test of 'retrieval serve': concurrent whole-image searches by id while 'retrieval index' adds
    images in another process; errors, generations seen, p50 / p95 latency."""
    from retrieval.bench.serve import bench_serve
    from retrieval.web.guard import guard_overhead

    res = bench_serve(data_dir, workdir=workdir, n_images=n_images, n_add=n_add, searches=searches,
                      clients=clients, threads=threads, preset=preset, rerank=rerank,
                      feature_store=feature_store or os.path.join(workdir, "features"), workers=workers,
                      progress=not as_json)
    res["guard_overhead"] = guard_overhead()   # what the request guard adds to a request (in process)
    if as_json:
        echo_json(res)
    else:
        _print_bench(res)
    if res["errors"] or res["inconsistent"] or res["stale"]:
        raise click.ClickException(f"{res['errors']} errors, {res['inconsistent']} inconsistent and {res['stale']} "
                                   f"stale results; first: {res['first_problem']}")
    if res["server_stop"]["exit_status"] != 0:
        raise click.ClickException(f"the server did not stop cleanly on SIGTERM (exit status "
                                   f"{res['server_stop']['exit_status']}): {res['server_stop']['said']}")


def _print_bench(res: dict) -> None:
    lat = res["latency_ms"]
    click.echo(f"{res['searches']} searches from {res['clients']} clients on {res['images']} images "
               f"(preset {res['preset']}, {res['server_threads']} server threads) while a sync added "
               f"{res['added']} images in {res['sync_seconds']:.1f} s:")
    click.echo(f"  errors {res['errors']}, inconsistent results {res['inconsistent']}, stale results {res['stale']}, "
               f"generations seen {res['generations_seen']}")
    srv = res["search_ms_in_server"]
    click.echo(f"  latency at the clients p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms (during the sync: p50 "
               f"{res['latency_during_sync_ms']['p50']:.1f} ms); {res['searches_per_s']:.1f} searches/s")
    click.echo(f"  search time in the server (queueing excluded) p50 {srv['p50']:.1f} ms, p95 {srv['p95']:.1f} ms "
               f"(re-ranking: {res['rerank']})")
    g = res["guard_overhead"]
    click.echo(f"  the request guard adds {g['get_page']['added_us']:.0f} us to a page, "
               f"{g['post_same_origin']['added_us']:.0f} us to a same-origin write")
    click.echo(f"  stopped by SIGTERM: exit status {res['server_stop']['exit_status']}, "
               f"{res['server_stop']['said']!r}")
