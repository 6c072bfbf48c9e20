"""The server process of ``retrieval serve``: uvicorn with the protocol of :mod:`retrieval.web.connections` (deadlines
for a request's headers and body, a cap on open connections sized to the file descriptors), and a stop that tells
the truth.

**Stopping.** Ctrl-C (SIGINT) or SIGTERM stops accepting connections, closes the idle ones, lets the requests in
progress finish and closes the index; :func:`serve` then returns a :class:`Stopped` saying how it went, and the
command says so in one line (exit status 130 after Ctrl-C, 0 after SIGTERM). A second Ctrl-C stops at once,
cutting the requests still in progress off. The signal is not raised again after the stop (uvicorn's own way), so
neither a traceback nor click's ``Aborted!`` follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass

import uvicorn

from retrieval.web.connections import Limits, fd_budget, protocol_class

logger = logging.getLogger(__name__)

KEEP_ALIVE = 30
"""Seconds an idle kept-alive connection stays open."""


@dataclass
class Stopped:
    """How a server stopped: by ``signal`` (None: it ended by itself), with ``in_progress`` requests being
    answered at the signal; ``forced`` by a second Ctrl-C, which cut ``cut_off`` of them off."""

    signal: int | None
    in_progress: int = 0
    forced: bool = False
    cut_off: int = 0

    @property
    def exit_code(self) -> int:
        return 128 + signal.SIGINT if self.signal == signal.SIGINT else 0

    def message(self) -> str:
        how = {signal.SIGINT: " by Ctrl-C (SIGINT)", signal.SIGTERM: " by SIGTERM"}.get(self.signal, "")
        n = self.in_progress
        if self.forced:
            cut = f", cutting off {self.cut_off} request{'s' if self.cut_off != 1 else ''} in progress" \
                if self.cut_off else ""
            return f"retrieval serve stopped{how}: a second Ctrl-C stopped it at once{cut}."
        if n == 0:
            done = "no request was in progress"
        else:
            done = f"the {n} request{'s' if n > 1 else ''} in progress {'were' if n > 1 else 'was'} answered first"
        return f"retrieval serve stopped{how}: {done}; the index was closed."


class Server(uvicorn.Server):
    """uvicorn's server, stopped by SIGINT / SIGTERM without raising the signal again (module docstring), and
    logging in one line (not a traceback) when accepting a connection finds no file descriptor free."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.stop_signal: int | None = None
        self.in_progress = 0
        self.unfinished = 0
        self._warned = 0.0

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def answering(self) -> list:
        """The connections with a request whose answer is not complete."""
        return [c for c in self.server_state.connections
                if getattr(c, "cycle", None) is not None and not c.cycle.response_complete]

    def handle_exit(self, sig, frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = sig
            self.in_progress = len(self.answering())
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets=None) -> None:
        await super().shutdown(sockets=sockets)
        self.unfinished = len(self.answering())   # requests still unanswered: only after a second Ctrl-C
        if self.force_exit:
            # cut off on purpose (the stop line says so): their connections closed without an answer, and the
            # cancellation of what still runs is not logged as an error with a traceback
            for conn in list(self.server_state.connections):
                cycle = getattr(conn, "cycle", None)
                if cycle is not None:
                    cycle.disconnected = True
                    cycle.message_event.set()
                conn.transport.close()
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)

    async def startup(self, sockets=None) -> None:
        asyncio.get_running_loop().set_exception_handler(self._loop_error)
        await super().startup(sockets=sockets)

    def _loop_error(self, loop, context) -> None:
        if context.get("message") == "socket.accept() out of system resource":   # asyncio retries in a second
            if time.monotonic() - self._warned > 10:
                self._warned = time.monotonic()
                logger.warning("no file descriptor free to accept a connection (%s); new connections wait",
                               context.get("exception"))
            return
        loop.default_exception_handler(context)


def serve(app, sock, *, threads: int, max_connections: int, header_timeout: float, body_timeout: float,
          log_level: str = "warning") -> Stopped:
    """Serve ``app`` on the listening socket ``sock`` until a signal stops it (module docstring)."""
    budget = fd_budget(max_connections, threads)
    limits = Limits(max_connections=budget["max_connections"], header_timeout=header_timeout,
                    body_timeout=body_timeout)
    if budget["max_connections"] < max_connections:
        logger.warning("at most %d open connections (not %d): %d file descriptors may be open (ulimit -n)",
                       budget["max_connections"], max_connections, budget["limit"])
    config = uvicorn.Config(app, http=protocol_class(limits), log_level=log_level, access_log=False,
                            timeout_keep_alive=KEEP_ALIVE, backlog=budget["backlog"])
    server = Server(config)
    server.run(sockets=[sock])
    return Stopped(server.stop_signal, server.in_progress, forced=server.force_exit, cut_off=server.unfinished)
