"""The server's listening socket: responses are not held back by Nagle's algorithm.

A response written in two parts (headers, then body) used to wait for the client's delayed ACK, 40 ms on Linux,
on every request: asyncio disables Nagle (TCP_NODELAY) only on sockets created with proto IPPROTO_TCP."""

from __future__ import annotations

import asyncio
import socket

from retrieval.cli.serve import bind


def test_accepted_connections_have_nagle_off():
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen = []

    async def main():
        def handle(reader, writer):
            s = writer.get_extra_info("socket")
            seen.append(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        _, w = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.02)
        w.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen and seen[0] != 0


def test_bind_refuses_a_port_in_use_with_one_line():
    import click
    import pytest

    first = bind("127.0.0.1", 0)
    try:
        with pytest.raises(click.ClickException, match=r"cannot listen on 127\.0\.0\.1:\d+"):
            bind("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()
