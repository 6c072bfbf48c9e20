"""``retrieval serve`` in its own process for the tests of its faults (slow clients, signals, fuzzing): a small index
of its own (three photos copied to a temporary folder, so that nothing the server does touches shared files), the
server's stderr kept in a file (read by the tests, never a pipe that could fill), and waits bounded by deadlines."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from conftest import shared_path

from retrieval.app.index import Index

PHOTOS = ("box.png", "box_in_scene.png", "graf1.png")


def small_index(root: Path) -> Path:
    """An index of three real photos copied under ``root`` (built with one worker, a second or two)."""
    photos = root / "photos"
    photos.mkdir(parents=True)
    for name in PHOTOS:
        shutil.copy(shared_path("opencv_samples", name), photos / name)
    index = root / "index"
    idx = Index.create(index, preset="default")
    report = idx.sync(photos, workers=1)
    idx.close()
    assert not report.errors, report.errors
    return index


def wait_for(predicate, timeout: float, what: str, step: float = 0.05):
    """Poll ``predicate`` until it returns a true value (returned) or ``timeout`` seconds pass (AssertionError)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


class Served:
    """``retrieval serve --index INDEX --port 0 ARGS`` in its own process; ``env`` more environment variables,
    ``preexec_fn`` run in the child first (resource limits). Its stderr goes to ``log``."""

    def __init__(self, index, *args, log: Path, env=None, preexec_fn=None, start_timeout: float = 120):
        self.log = Path(log)
        self._err = open(self.log, "w", encoding="utf-8")
        self.proc = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index),
                                      "--port", "0", *args], stdout=subprocess.DEVNULL, stderr=self._err,
                                     env=dict(os.environ, **(env or {})), preexec_fn=preexec_fn)

        def port():
            if self.proc.poll() is not None:
                raise AssertionError(f"retrieval serve exited ({self.proc.returncode}): {self.stderr()}")
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", self.stderr())
            return int(m.group(1)) if m else None

        self.port = wait_for(port, start_timeout, "the server's address on stderr")
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=120)
        self.client.get("/api/info").raise_for_status()   # queued in the listening socket until the server runs

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def connect(self, timeout: float = 60) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return s

    def accepting(self) -> bool:
        """Whether the listening socket still takes connections."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
            return True
        except OSError:
            return False

    def stop(self, sig=signal.SIGINT, timeout: float = 60) -> int:
        """Send ``sig`` (when still running) and wait for the exit; its status (killed after ``timeout``: -9)."""
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.proc.returncode


def read_response(sock: socket.socket, timeout: float = 60) -> bytes:
    """Everything ``sock`` receives until the server closes it (or ``timeout`` seconds: what came so far)."""
    sock.settimeout(timeout)
    out = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        out += chunk
    return out


def one_line_error(raw: bytes, status: int) -> str:
    """The one-line JSON error of a raw HTTP response with ``status`` (AssertionError otherwise)."""
    import json

    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), raw[:300]
    message = json.loads(body)["error"]
    assert "\n" not in message and "Traceback" not in message, message
    return message
