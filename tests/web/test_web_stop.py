"""``retrieval serve`` stopped by Ctrl-C (SIGINT) or SIGTERM answers the request in progress first, then says so in
one line and exits 130 (SIGINT) or 0 (SIGTERM): no ``Aborted!``, no traceback (:mod:`retrieval.web.server`)."""

from __future__ import annotations

import json
import signal

import pytest
from serve_process import Served, read_response, small_index, wait_for


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return small_index(tmp_path_factory.mktemp("stop"))


def search_in_two_parts(served: Served, image_id: int) -> tuple:
    """A search by id whose headers and first half of body are sent now: (socket, rest of the body)."""
    boundary = "stop"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="id"\r\n\r\n{image_id}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="k"\r\n\r\n3\r\n--{boundary}--\r\n').encode()
    s = served.connect()
    s.sendall((f"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
               f"boundary={boundary}\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode())
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")   # the route is reading the body: in progress
    half = len(body) // 2
    s.sendall(body[:half])
    return s, body[half:]


@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, "by Ctrl-C (SIGINT)"),
                                               (signal.SIGTERM, 0, "by SIGTERM")])
def test_a_signal_lets_the_request_in_progress_finish_then_exits_with_one_line(index, tmp_path, sig, status, said):
    served = Served(index, log=tmp_path / "serve.log")
    image_id = served.client.get("/api/images").json()["images"][0]["id"]
    idle = served.connect()   # an idle kept-alive connection: closed at the stop, not waited for
    sock, rest = search_in_two_parts(served, image_id)
    served.proc.send_signal(sig)
    # the server stops taking connections at once...
    wait_for(lambda: not served.accepting(), 60, "the listening socket to close after the signal")
    assert served.proc.poll() is None   # ...but waits for the request in progress
    sock.sendall(rest)
    raw = read_response(sock, timeout=120)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), raw[:300]
    assert json.loads(body)["hits"][0]["id"] == image_id
    assert served.proc.wait(120) == status
    assert read_response(idle, timeout=5) == b""
    lines = [line for line in served.stderr().splitlines() if line.strip()]
    assert lines[-1] == (f"retrieval serve stopped {said}: the 1 request in progress was answered first; the index "
                         f"was closed."), lines
    text = served.stderr()
    assert "Traceback" not in text and "Aborted" not in text, text
    served.stop()


def test_a_signal_with_nothing_in_progress_stops_at_once(index, tmp_path):
    served = Served(index, log=tmp_path / "serve.log")
    # a page asked with "Connection: close" and read to the end of the stream: the server closes the connection
    # only once the answer is complete, so nothing is in progress when the signal comes
    with served.connect() as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nConnection: close\r\n\r\n".encode())
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200 "), raw[:200]
    assert served.stop(signal.SIGINT) == 130
    lines = [line for line in served.stderr().splitlines() if line.strip()]
    assert lines[-1] == "retrieval serve stopped by Ctrl-C (SIGINT): no request was in progress; the index was closed."


def test_a_second_ctrl_c_stops_at_once_cutting_the_request_in_progress_off(index, tmp_path):
    served = Served(index, log=tmp_path / "serve.log")
    image_id = served.client.get("/api/images").json()["images"][0]["id"]
    sock, _ = search_in_two_parts(served, image_id)   # its body never completes
    served.proc.send_signal(signal.SIGINT)
    wait_for(lambda: not served.accepting(), 60, "the listening socket to close after the first Ctrl-C")
    assert served.proc.poll() is None   # waiting for the request in progress
    served.proc.send_signal(signal.SIGINT)
    assert served.proc.wait(60) == 130
    assert read_response(sock, timeout=30) == b""   # cut off: closed without an answer
    lines = [line for line in served.stderr().splitlines() if line.strip()]
    assert lines[-1] == ("retrieval serve stopped by Ctrl-C (SIGINT): a second Ctrl-C stopped it at once, cutting "
                         "off 1 request in progress."), lines
    assert "Traceback" not in served.stderr()
    served.stop()
