"""Slow clients cannot starve ``retrieval serve`` (:mod:`retrieval.web.connections`): connections that never finish
their headers, with more of them than the server has file descriptors, leave the page answering; a request's headers
and body have deadlines (a one-line 408, the connection closed); past the connection cap with every connection busy a
new one is refused (503) at once rather than left waiting."""

from __future__ import annotations

import resource
import socket
import time

import httpx
import pytest
from serve_process import Served, one_line_error, read_response, small_index, wait_for

FD_LIMIT = 256
HALF_OPEN = 300   # more than the server's file descriptors


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return small_index(tmp_path_factory.mktemp("slow-clients"))


def lowered_fd_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def half_open(served: Served) -> socket.socket:
    """A connection that sends part of a request's headers and never the rest."""
    s = served.connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow")
    return s


def test_the_page_answers_while_more_half_open_connections_than_file_descriptors_are_held(index, tmp_path):
    # the headers deadline is far away: what keeps the page answering is the cap, not a timeout
    served = Served(index, "--header-timeout", "600", log=tmp_path / "serve.log", preexec_fn=lowered_fd_limit)
    held = []
    try:
        held = [half_open(served) for _ in range(HALF_OPEN)]
        with httpx.Client(base_url=served.url, timeout=60) as fresh:   # new connections, after all of them
            page = fresh.get("/")
            assert page.status_code == 200 and "text/html" in page.headers["content-type"]
            assert fresh.get("/api/info").status_code == 200
        # the oldest half-open connections were closed to make room, each told so in one line
        for s in held[:5]:
            assert "too many open connections" in one_line_error(read_response(s, timeout=30), 503)
        assert served.proc.poll() is None
    finally:
        for s in held:
            s.close()
        served.stop()
    log = served.stderr()
    assert "Traceback" not in log, log
    assert f"{FD_LIMIT} file descriptors may be open" in log   # the cap was lowered to fit, and the server said so


def test_incomplete_headers_are_answered_408_and_closed(index, tmp_path):
    served = Served(index, "--header-timeout", "1", log=tmp_path / "serve.log")
    try:
        partial = half_open(served)
        silent = served.connect()
        message = one_line_error(read_response(partial, timeout=60), 408)
        assert "headers did not arrive within 1 s" in message
        assert read_response(silent, timeout=60) == b""   # nothing of a request came: closed without an answer
        # a kept-alive connection that sends its requests in time is not affected
        assert served.client.get("/api/info").status_code == 200
        time.sleep(0.2)
        assert served.client.get("/api/info").status_code == 200
    finally:
        served.stop()
    assert "Traceback" not in served.stderr()


def test_a_stalled_body_is_answered_408_and_a_slow_steady_one_goes_through(index, tmp_path):
    served = Served(index, "--body-timeout", "1", log=tmp_path / "serve.log")
    boundary = "slowbody"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="id"\r\n\r\n1\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="k"\r\n\r\n3\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="pad"\r\n\r\n{"x" * 2400}\r\n'
            f"--{boundary}--\r\n").encode()
    head = (f"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
            f"boundary={boundary}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    try:
        stalled = served.connect()
        stalled.sendall(head + body[:20])
        message = one_line_error(read_response(stalled, timeout=60), 408)
        assert "request body did not arrive in time" in message

        # 500 bytes of body buy a second more: chunks of 1,000 bytes every 0.5 s keep well ahead of the deadline
        steady = served.connect()
        steady.sendall(head)
        for i in range(0, len(body), 1000):
            steady.sendall(body[i:i + 1000])
            time.sleep(0.5)
        raw = _one_response(steady)
        assert raw.startswith(b"HTTP/1.1 "), raw[:200]
        assert not raw.startswith(b"HTTP/1.1 408"), raw[:300]
        assert int(raw.split(b" ", 2)[1]) < 500, raw[:300]
    finally:
        served.stop()
    assert "Traceback" not in served.stderr()


def _one_response(sock: socket.socket, timeout: float = 60) -> bytes:
    """One response read from a kept-alive connection (by its Content-Length)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                  if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return head + b"\r\n\r\n" + rest


def test_past_the_cap_with_every_connection_busy_a_new_one_is_refused_at_once(index, tmp_path):
    served = Served(index, "--max-connections", "4", "--body-timeout", "600", log=tmp_path / "serve.log")
    busy = []
    try:
        served.client.close()   # its kept-alive connection would count (and could be closed to make room)
        for _ in range(4):   # requests whose bodies are still coming: in progress, never closed to make room
            s = served.connect()
            s.sendall(b"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
                      b"boundary=b\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
            # the server asks for the body once the route reads it: the request is in progress
            assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
            s.sendall(b"--b")
            busy.append(s)
        refused = served.connect()
        assert "too many connections with a request in progress" in one_line_error(read_response(refused), 503)
        busy.pop().close()

        def answers():
            try:
                return httpx.get(served.url + "/api/info", timeout=30).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, 60, "a request once a connection was freed")
    finally:
        for s in busy:
            s.close()
        served.stop()
    assert "Traceback" not in served.stderr()
