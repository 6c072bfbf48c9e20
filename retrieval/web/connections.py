"""Slow and idle clients cannot starve ``retrieval serve``: the HTTP protocol it serves with (uvicorn's h11
protocol with :class:`Deadlines`) adds deadlines and a cap on open connections.

- **Headers deadline**: a request's headers must arrive complete within ``header_timeout`` seconds of the
  connection (on a kept-alive connection, of the request's first byte; uvicorn's keep-alive timeout closes one
  that stays silent). Otherwise the connection is closed, after a one-line 408 when part of a request came.
- **Body deadline** (the rule of Apache's mod_reqtimeout, ``body=20,MinRate=500``): the body must arrive within
  ``body_timeout`` seconds of the headers plus one second per ``min_rate`` bytes received, so a slow but steady
  upload goes on; time the server itself holds the body back (its buffer full, ``Expect: 100-continue`` not yet
  answered) does not count. Otherwise: a one-line 408, the connection closed, and the route sees the client gone.
- **Connection cap**: at most ``max_connections`` connections are open at once. A connection past the cap closes
  the one that has waited longest without a request in progress (an idle kept-alive connection, or one still
  sending its headers: the half-open connections of a slow-loris attack); when every open connection has a request
  in progress, the new one is answered 503 and closed at once. :func:`fd_budget` sizes the cap (and how many
  connections are accepted at a time) from the file descriptors the process may open, so that accepting never
  fails for want of one: the listening socket keeps answering however many connections are held open.

Connections closed this way are counted in :class:`Limits` (``timed_out``, ``evicted``, ``refused``).
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict

HEADER_TIMEOUT = 10.0
"""Seconds for a request's headers to arrive (``--header-timeout``)."""
BODY_TIMEOUT = 20.0
"""Seconds for a request's body to arrive, plus one per ``MIN_RATE`` bytes received (``--body-timeout``)."""
MIN_RATE = 500
"""Bytes per second of body that extend the body deadline by one second (mod_reqtimeout's MinRate)."""
MAX_CONNECTIONS = 1000
"""Open connections at most (``--max-connections``), fewer when file descriptors are short (:func:`fd_budget`)."""


def raw_response(status: int, reason: str, message: str, extra: tuple = ()) -> bytes:
    """A whole HTTP/1.1 response with a one-line JSON error, written straight to a connection that is then closed
    (outside any request the app handles)."""
    body = json.dumps({"error": message}).encode("utf-8")
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
            "connection: close", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class Limits:
    """The deadlines and the cap shared by the connections of one server, and what they closed."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT,
                 body_timeout: float = BODY_TIMEOUT, min_rate: float = MIN_RATE):
        self.max_connections = max(1, int(max_connections))
        self.header_timeout = float(header_timeout)
        self.body_timeout = float(body_timeout)
        self.min_rate = float(min_rate)
        self.open: set = set()
        self.waiting: OrderedDict = OrderedDict()   # connections without a request in progress, longest first
        self.timed_out = self.evicted = self.refused = 0

    def make_room(self) -> bool:
        """Below the cap, or a connection without a request in progress closed to make room; False when every
        open connection has a request in progress."""
        if len(self.open) < self.max_connections:
            return True
        while self.waiting:
            conn, _ = self.waiting.popitem(last=False)
            self.open.discard(conn)
            if not conn.transport.is_closing():
                conn.evict()
                self.evicted += 1
                return True
        return False

    def counts(self) -> dict:
        return {"open": len(self.open), "timed_out": self.timed_out, "evicted": self.evicted, "refused": self.refused}


def open_fds() -> int:
    """File descriptors this process has open now (Linux: /proc/self/fd; elsewhere a guess of 64)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit (no privilege needed); returns the soft limit now."""
    try:
        import resource
    except ImportError:   # not a Unix: no such limit to raise
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def fd_budget(max_connections: int, threads: int, *, limit: int | None = None, in_use: int | None = None) -> dict:
    """How many connections the server may hold open and accept at a time within its file descriptors.

    Of the descriptors not yet in use (``limit`` minus ``in_use``), a reserve is kept for the threads' SQLite
    connections (three files each) and the index's own files; half of the rest may be open connections, the other
    half is room for the connections accepted in one go before the cap closes others (``backlog``, at most 2,048)
    and for the files that requests in progress open (an upload, an original being sent)."""
    limit = raise_fd_limit() if limit is None else int(limit)
    in_use = open_fds() if in_use is None else int(in_use)
    free = max(0, limit - in_use - 32 - 4 * (int(threads) + 2))
    connections = max(4, min(int(max_connections), free // 2))
    backlog = max(8, min(2048, (free - connections) // 2))
    return {"limit": limit, "in_use": in_use, "max_connections": connections, "backlog": backlog,
            "asked": int(max_connections)}


class Deadlines:
    """What uvicorn's h11 protocol gets (a mixin before ``H11Protocol``): the deadlines and the cap of the module
    docstring; :func:`protocol_class` makes the protocol class of one server (its :class:`Limits`)."""

    limits: Limits

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.phase = "idle"   # idle: no request in progress; headers: part of one came; body; busy: being answered
        self.deadline = None
        self.refused = False
        self.seen_cycle = None
        self.body_started = 0.0
        self.body_bytes = 0

    # ------------------------------------------------------------------ the connection
    def connection_made(self, transport) -> None:
        limits = self.limits
        if not limits.make_room():
            self.refused = True
            self.transport = transport
            limits.refused += 1
            transport.write(raw_response(503, "Service Unavailable", "too many connections with a request in "
                                         "progress; try again in a moment.", ("retry-after: 1",)))
            transport.close()
            return
        super().connection_made(transport)
        limits.open.add(self)
        limits.waiting[self] = None
        self.arm(limits.header_timeout)

    def connection_lost(self, exc) -> None:
        self.disarm()
        self.limits.open.discard(self)
        self.limits.waiting.pop(self, None)
        if not self.refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.phase == "idle":
            self.phase = "headers"
            if self.deadline is None:   # a kept-alive connection: the deadline runs from the request's first byte
                self.arm(self.limits.header_timeout)
        elif self.phase == "body":
            self.body_bytes += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        self.follow()

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self.disarm()
            self.phase = "idle"
            self.seen_cycle = self.cycle
            self.limits.waiting.pop(self, None)
            self.limits.waiting[self] = None   # the end of the line: the longest waiting are closed first
        super().on_response_complete()   # may handle a pipelined request: after the state above

    def follow(self) -> None:
        """Move to the phase the request has reached (its headers complete, its body complete)."""
        from h11 import SEND_BODY

        if self.cycle is not None and self.cycle is not self.seen_cycle:   # a request's headers came whole
            self.seen_cycle = self.cycle
            self.limits.waiting.pop(self, None)
            self.disarm()
            self.phase = "busy"
            if self.conn.their_state is SEND_BODY:
                self.phase = "body"
                self.body_started, self.body_bytes = time.monotonic(), 0
                self.arm(self.limits.body_timeout)
        elif self.phase == "body" and self.conn.their_state is not SEND_BODY:
            self.disarm()
            self.phase = "busy"

    # ------------------------------------------------------------------ deadlines
    def arm(self, seconds: float) -> None:
        self.disarm()
        self.deadline = self.loop.call_later(max(0.0, seconds), self.expired)

    def disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def expired(self) -> None:
        self.deadline = None
        if self.transport is None or self.transport.is_closing():
            return
        limits = self.limits
        if self.phase == "body":
            if self.flow.read_paused or (self.cycle is not None and self.cycle.waiting_for_100_continue):
                self.body_started += limits.body_timeout   # the server holds the body back: not the client's time
                self.arm(limits.body_timeout)
                return
            due = self.body_started + limits.body_timeout + self.body_bytes / limits.min_rate
            if time.monotonic() < due:   # bytes came meanwhile: they bought time
                self.arm(max(0.2, due - time.monotonic()))
                return
            limits.timed_out += 1
            self.close_with(408, "Request Timeout", f"the request body did not arrive in time (at least "
                                                    f"{limits.min_rate:.0f} bytes per second after "
                                                    f"{limits.body_timeout:g} s); the request was dropped.")
        elif self.phase in ("idle", "headers"):
            limits.timed_out += 1
            self.close_with(408, "Request Timeout", f"the request headers did not arrive within "
                                                    f"{limits.header_timeout:g} s.", quiet=self.phase == "idle")

    def evict(self) -> None:
        """Closed to make room for a new connection (:meth:`Limits.make_room`)."""
        self.close_with(503, "Service Unavailable", "too many open connections: this one, which had no complete "
                                                    "request, was closed.", quiet=self.phase == "idle")

    def close_with(self, status: int, reason: str, message: str, *, quiet: bool = False) -> None:
        """Close the connection, first answering ``status`` with ``message`` unless ``quiet`` (nothing of a request
        came) or the app has begun its own answer; a request being received sees the client gone."""
        self.disarm()
        self.limits.waiting.pop(self, None)
        cycle = self.cycle if self.phase in ("body", "busy") else None
        started = cycle is not None and cycle.response_started
        if cycle is not None:
            cycle.disconnected = True
            cycle.message_event.set()
        if not quiet and not started:
            self.transport.write(raw_response(status, reason, message))
        self.transport.close()


def protocol_class(limits: Limits) -> type:
    """The protocol class of one server (give it as uvicorn's ``Config(http=...)``): uvicorn's h11 protocol with
    :class:`Deadlines` (uvicorn imported here: the CLI reads this module's defaults without it)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return type("DeadlineH11Protocol", (Deadlines, H11Protocol), {"limits": limits})
