"""A response's head goes out with its body in one write; a head alone is never held past one turn
of the event loop. On a real transport over a socket pair (the peer reads without blocking)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from service.api.coalescing import HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"


def _available(peer: socket.socket) -> bytes:
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b""


def on_a_pair(check: Callable[[HeadWithBody, socket.socket], Awaitable[None]]) -> None:
    """Run `check` on an event loop, with our end of a socket pair wrapped, and the peer's end."""

    async def main() -> None:
        ours, peer = socket.socketpair()
        peer.setblocking(False)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
        try:
            await check(HeadWithBody(transport, loop), peer)  # type: ignore[arg-type]
        finally:
            transport.close()
            peer.close()

    asyncio.run(main())


async def _settle() -> None:
    for _ in range(3):  # the transport's own write and the flush each take a turn at most
        await asyncio.sleep(0)


def test_a_head_waits_for_its_body_and_both_go_in_one_write() -> None:
    async def check(transport: HeadWithBody, peer: socket.socket) -> None:
        transport.write(HEAD)
        assert _available(peer) == b""  # held, not sent
        transport.write(b"hello")
        await _settle()
        assert _available(peer) == HEAD + b"hello"

    on_a_pair(check)


def test_a_head_with_nothing_behind_it_goes_out_on_the_next_turn() -> None:
    async def check(transport: HeadWithBody, peer: socket.socket) -> None:
        transport.write(HEAD)
        await _settle()
        assert _available(peer) == HEAD
        transport.write(b"later")  # a body computed later goes on its own
        await _settle()
        assert _available(peer) == b"later"

    on_a_pair(check)


def test_other_writes_pass_straight_through_and_close_sends_a_held_head() -> None:
    async def check(transport: HeadWithBody, peer: socket.socket) -> None:
        transport.write(b"HTTP/1.1 431 Too Large\r\ncontent-length: 2\r\n\r\n{}")  # a whole answer: no head
        assert _available(peer).endswith(b"{}")
        transport.write(HEAD)
        transport.close()
        await _settle()
        assert _available(peer) == HEAD
        assert transport.is_closing()  # everything else is the transport's own

    on_a_pair(check)
