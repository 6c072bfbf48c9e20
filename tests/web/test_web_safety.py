"""A server safe to leave running, attacked through a real HTTP client (httpx, or a raw socket) against a running
uvicorn server on 127.0.0.1: cross-site writes, DNS rebinding (foreign Host headers), a chunked body past the
limit, ids outside int64, a decode too large for the budget, the security headers, interrupted uploads, a stale token
cookie, a full disk (a server process with a file-size limit)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import time

import httpx
import numpy as np
import pytest
from helpers import copy_index
from web_support import ServeProcess, ServerThread, assert_error, served_copy, textured, web_base  # noqa: F401

from retrieval.web.app import UPLOAD_OVERHEAD

MAX_UPLOAD = 1_000_000
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def served(web_base, tmp_path_factory):  # noqa: F811
    server, index = served_copy(web_base, tmp_path_factory, max_upload_bytes=MAX_UPLOAD,
                                allow_hosts=("photos.example",), max_decode_mb=64)
    client = httpx.Client(base_url=server.url, timeout=120)
    yield server, index, client
    client.close()
    server.stop()


def png_bytes(arr) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()



def state(client) -> tuple:
    info = client.get("/api/info").json()
    return info["generation"], info["indexed"]


def new_photo(seed: int) -> bytes:
    return png_bytes(textured(seed, size=(300, 240)))


# ---------------------------------------------------------------------------------------------- cross-site writes
def test_cross_site_writes_are_refused_and_change_nothing(served):
    _, _, client = served
    before = state(client)
    some_id = client.get("/api/images", params={"limit": 1}).json()["images"][0]["id"]
    for headers in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": "null"}, {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}):
        r = client.post("/api/images", files={"image": ("planted.png", new_photo(41))}, headers=headers)
        assert_error(r, 403, "cross-site")
        assert_error(client.delete(f"/api/images/{some_id}", headers=headers), 403, "cross-site")
        assert_error(client.post("/api/search", data={"id": some_id}, headers=headers), 403)
    assert state(client) == before
    assert client.get(f"/api/images/{some_id}").json()["status"] == "indexed"


def test_the_pages_own_writes_need_its_csrf_token_and_scripts_need_none(served):
    server, _, client = served
    own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
    # a browser's same-origin request without the token (what a form of this origin, or a rebinding page, sends)
    assert_error(client.post("/api/images", files={"image": ("a.png", new_photo(42))}, headers=own), 403, "CSRF")
    # the page: the cookie set with every HTML page, sent back as the X-CSRF-Token header
    with httpx.Client(base_url=server.url, timeout=120) as browser:
        page = browser.get("/query")
        token = page.cookies.get("retrieval_csrf")
        assert token and len(token) >= 32
        assert "samesite=strict" in page.headers["set-cookie"].lower()
        r = browser.post("/api/images", files={"image": ("a.png", new_photo(42))},
                         headers={**own, "X-CSRF-Token": token})
        assert r.status_code == 201, r.text
        new_id = r.json()["image"]["id"]
        assert_error(browser.delete(f"/api/images/{new_id}", headers={**own, "X-CSRF-Token": "wrong"}), 403, "CSRF")
        r = browser.delete(f"/api/images/{new_id}", headers={**own, "X-CSRF-Token": token})
        assert r.status_code == 200 and r.json()["removed"] == new_id
    # a script (curl, Python): neither Origin nor Sec-Fetch-Site, no token needed, as the README shows
    r = client.post("/api/images", files={"image": ("b.png", new_photo(43))})
    assert r.status_code == 201, r.text
    assert client.delete(f"/api/images/{r.json()['image']['id']}").status_code == 200


# ---------------------------------------------------------------------------------------------- Host allow-list
ROUTES = [("GET", "/"), ("GET", "/query"), ("GET", "/match?a=0&b=1"), ("GET", "/docs"), ("GET", "/openapi.json"),
          ("GET", "/static/app.js"), ("GET", "/api/info"), ("GET", "/api/images"), ("GET", "/api/images/0"),
          ("GET", "/api/images/0/thumbnail"), ("POST", "/api/search"), ("POST", "/api/match"),
          ("POST", "/api/images"), ("DELETE", "/api/images/0")]


def test_a_foreign_host_is_refused_on_every_route(served):
    server, _, client = served
    before = state(client)
    for method, path in ROUTES:
        for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example", "", "a b"):
            r = client.request(method, path, headers={"Host": host})
            assert_error(r, 421, "does not name this server")
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "127.0.0.2", "[::1]:8000",
                 "photos.example", f"PHOTOS.example:{server.port}"):
        assert client.get("/api/info", headers={"Host": host}).status_code == 200, host
    assert state(client) == before


# ---------------------------------------------------------------------------------------------- body size
def send_chunked(port: int, total: int, host: str) -> tuple[int, int]:
    """POST a chunked multipart body of ``total`` bytes on a raw socket; returns (status, bytes sent) once the server
    answered or closed the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    boundary = "x" * 16
    head = (f"POST /api/images HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n").encode()
    sock.sendall(head)
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"big.png\"\r\n"
            f"Content-Type: image/png\r\n\r\n").encode()
    sent = 0
    block = os.urandom(1 << 16)
    sock.setblocking(False)
    answer = b""
    try:
        chunk = part
        while sent < total:
            data = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
            view = memoryview(data)
            while view:
                try:
                    n = sock.send(view)
                    view = view[n:]
                except BlockingIOError:
                    time.sleep(0.001)
                try:
                    got = sock.recv(65536)
                    if got:
                        answer += got
                        raise StopIteration
                    raise StopIteration   # closed
                except BlockingIOError:
                    pass
            sent += len(chunk)
            chunk = block
    except (StopIteration, BrokenPipeError, ConnectionResetError):
        pass
    sock.setblocking(True)
    sock.settimeout(30)
    try:
        while b"\r\n\r\n" not in answer:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
    except (OSError, TimeoutError):
        pass
    sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, sent


def test_a_chunked_body_past_the_limit_is_refused_as_it_arrives(served):
    server, index, client = served
    before = state(client)
    limit = MAX_UPLOAD + UPLOAD_OVERHEAD
    refused = server.app.state.refused_bodies
    n_before = len(refused)
    status, sent = send_chunked(server.port, 300_000_000, f"127.0.0.1:{server.port}")
    assert status == 413
    assert sent < 300_000_000 // 10                      # the client was stopped early
    assert len(refused) == n_before + 1 and refused[-1] < 2 * limit   # counted by the server as it arrived
    assert state(client) == before
    incoming = index / "uploads" / ".incoming"
    assert not incoming.exists() or not list(incoming.glob("*.part"))
    # a declared Content-Length over the limit is refused before any byte is read
    r = client.post("/api/images", content=b"x" * (limit + 10), headers={"Content-Type": "application/octet-stream"})
    assert_error(r, 413, "limit")


# ---------------------------------------------------------------------------------------------- clear answers
def test_ids_outside_int64_are_not_found(served):
    _, _, client = served
    huge = "99999999999999999999999"
    for r in (client.get(f"/api/images/{huge}"), client.get(f"/api/images/{huge}/thumbnail"),
              client.delete(f"/api/images/{huge}"), client.get(f"/api/images/-{huge}"),
              client.post("/api/search", data={"id": huge}), client.get("/query", params={"id": huge})):
        assert_error(r, 404)
    some_id = client.get("/api/images", params={"limit": 1}).json()["images"][0]["id"]
    assert_error(client.post("/api/match", data={"a_id": some_id, "b_id": huge}), 404)
    assert_error(client.post("/api/match", data={"a_id": huge, "b_id": some_id}), 404)


def test_the_command_line_answers_ids_outside_int64_in_one_line(served, tmp_path):
    _, index, _ = served
    from click.testing import CliRunner

    from retrieval.cli.main import main as cli

    for args in (["query", "99999999999999999999999", "--index", str(index)],
                 ["remove", "99999999999999999999999", "--index", str(index)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 1, res.output
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in res.output and "99999999999999999999999" in lines[0], lines


def test_an_image_too_costly_to_decode_is_refused_from_its_header(served, monkeypatch):
    server, _, client = served
    from PIL import Image, ImageFile

    # every decode of an image file in this process (the server runs in a thread of it) goes through
    # Image.Image.load (Pillow's ImageFile.load and its TIFF and WebP overrides call it): record what is decoded
    decoded = []
    load = Image.Image.load

    def recording_load(self):
        if isinstance(self, ImageFile.ImageFile):
            decoded.append(self.size)
        return load(self)

    monkeypatch.setattr(Image.Image, "load", recording_load)
    # the recorder sees the server's decodes: an ordinary upload searched is decoded
    r = client.post("/api/search", files={"image": ("fine.png", new_photo(45))})
    assert r.status_code == 200, r.text
    assert (300, 240) in decoded, decoded
    decoded.clear()
    buf = io.BytesIO()   # 3000 x 3000 RGBA: 3 KB of PNG, about 160 MB to decode; the server's budget is 64 MB
    Image.fromarray(np.zeros((3000, 3000, 4), np.uint8), "RGBA").save(buf, format="PNG")
    r = client.post("/api/search", files={"image": ("bomb.png", buf.getvalue())})
    assert_error(r, 413, "bomb.png", "MB to decode", "--max-decode-mb")
    r = client.post("/api/images", files={"image": ("bomb.png", buf.getvalue())})
    assert_error(r, 413, "MB to decode")
    assert (3000, 3000) not in decoded, decoded   # refused from the header: not one of its pixels was decoded
    assert server.service.budget.in_use == 0      # and nothing of the budget is held for it


def test_html_responses_carry_the_security_headers_and_no_inline_script(served):
    _, _, client = served
    some_id = client.get("/api/images", params={"limit": 2}).json()["images"]
    for path in ("/", "/query", f"/query?id={some_id[0]['id']}", f"/match?a={some_id[0]['id']}&b={some_id[1]['id']}",
                 "/docs"):
        r = client.get(path)
        assert r.status_code == 200
        csp = r.headers["content-security-policy"]
        script_src = re.search(r"script-src ([^;]*)", csp).group(1)
        assert "'unsafe-inline'" not in script_src and "frame-ancestors 'none'" in csp
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        for tag in re.findall(r"<script[^>]*>", r.text):
            assert "src=" in tag, (path, tag)          # every script is a file of the server
        assert not re.search(r"<script[^>]*>[^<\s]", r.text), path
        assert not re.search(r"\son[a-z]+=", r.text), path   # no inline event handler
    assert client.get("/api/info").headers["x-content-type-options"] == "nosniff"


def test_a_thumbnail_of_a_deleted_file_names_the_cause(served, web_base):  # noqa: F811
    server, index, client = served
    photos, _, _ = web_base
    import shutil

    extra = photos.parent / "gone.png"
    extra.write_bytes(new_photo(44))
    r = client.post("/api/images", files={"image": ("gone.png", extra.read_bytes())})
    assert r.status_code == 201, r.text
    rec = r.json()["image"]
    shutil.move(rec["path"], str(extra) + ".moved")   # the stored copy disappears behind the server's back
    try:
        assert_error(client.get(f"/api/images/{rec['id']}/thumbnail", params={"size": "large"}), 404,
                     "the file is gone", rec["path"])
    finally:
        shutil.move(str(extra) + ".moved", rec["path"])
        client.delete(f"/api/images/{rec['id']}")


# ---------------------------------------------------------------------------------------------- token mode
def test_a_stale_token_cookie_is_replaced_by_the_token_of_the_url(web_base, tmp_path_factory):  # noqa: F811
    server, _ = served_copy(web_base, tmp_path_factory, token="s3cret")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            c.cookies.set("retrieval_token", "old-token")
            assert c.get("/api/info").status_code == 401
            r = c.get("/", params={"token": "s3cret"})
            assert r.status_code == 200
            assert "retrieval_token=s3cret" in r.headers.get("set-cookie", "")
            c.cookies.set("retrieval_token", "s3cret")
            assert c.get("/api/info").status_code == 200
            # Bearer clients keep working, writes included, without a CSRF token
            r = c.post("/api/search", data={"id": 0}, headers={"Authorization": "Bearer s3cret", "Origin": server.url})
            assert r.status_code == 200, r.text
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- restart, disk full
def test_a_restart_removes_interrupted_uploads(served, tmp_path):
    _, index, _ = served
    from retrieval.web.service import Service

    copy = copy_index(index, tmp_path / "copy")
    incoming = copy / "uploads" / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    stale = incoming / ".upload-abc.part"
    stale.write_bytes(b"half an upload")
    svc = Service(copy, workers=1)
    try:
        assert not stale.exists()
    finally:
        svc.close()


def test_a_full_disk_answers_507_and_changes_nothing(web_base, tmp_path):  # noqa: F811
    """The server runs in its own process with a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored): adding a photo
    needs a file larger than the limit (the upload itself, 900 KB), which fails with EFBIG like a full disk."""
    import resource

    copy = copy_index(web_base[1], tmp_path / "copy")
    limit = 300_000   # starting and searching write nothing; storing the upload passes the limit

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    server = ServeProcess(copy, "--threads", "1", preexec_fn=limited)
    try:
        big = png_bytes(np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8))
        assert MAX_UPLOAD > len(big) > limit
        c = server.client
        before = state(c)
        r = c.post("/api/images", files={"image": ("big.png", big)})
        assert_error(r, 507, "no space left", str(copy))
        assert state(c) == before
        assert c.post("/api/search", data={"id": 0, "k": 3}).status_code == 200   # searches go on
        assert not [p for p in (copy / "uploads").glob("*") if p.is_file()] if (copy / "uploads").exists() else True
    finally:
        server.stop()


def test_json_of_every_error_is_one_line(served):
    _, _, client = served
    r = client.get("/api/images/notanumber")
    assert_error(r, 400)
    assert json.loads(r.text)


def test_the_guard_overhead_measures_a_guard_that_answers():
    """guard_overhead times the guard on requests it lets through: the wrapped app answers them (a refused request
    would be cheaper and the figure meaningless)."""
    import asyncio

    from retrieval.web.guard import Guard, HostPolicy

    seen = []

    async def app(scope, receive, send):
        seen.append(scope["method"])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b""})

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    guarded = Guard(app, hosts=HostPolicy("127.0.0.1"), token=None, max_body=1 << 20, refused_bodies=[])
    scope = {"type": "http", "method": "POST", "path": "/api/search", "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
                         (b"sec-fetch-site", b"same-origin"), (b"cookie", b"retrieval_csrf=abc"),
                         (b"x-csrf-token", b"abc")]}
    asyncio.run(guarded(scope, receive, send))
    assert seen == ["POST"] and sent[0]["status"] == 200
    headers = dict(sent[0]["headers"])
    assert headers[b"x-frame-options"] == b"DENY" and b"script-src 'self'" in headers[b"content-security-policy"]
