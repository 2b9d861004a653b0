#!/usr/bin/env python3
"""The portal as the lab's Internet side sees it: a small HTTP reverse proxy whose listening
socket lives in a lab namespace (pl-inet, 203.0.113.80:80) and whose upstream connections leave
from the root namespace (the portal on 127.0.0.1:PORT). A socket keeps the namespace it was made
in, so one process serves both sides without putting a lab address on the root namespace.

Like the production nginx, it appends the client's address to X-Forwarded-For (the portal trusts
it from loopback, PORTAL_TRUSTED_PROXIES) and passes the request on; one request per
connection (it answers with "Connection: close"). A request naming any other host (a walled
device's HTTP, DNATed here by the firewall) is answered with a redirect to the "not registered"
page, as production nginx's default_server does. Root only; standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import socket

MAX_HEAD = 64 * 1024
HOP_BY_HOP = (b"connection:", b"keep-alive:", b"proxy-connection:", b"x-forwarded-for:")


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    """setns(2) into a network namespace (os.setns needs Python 3.12)."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def listening_socket(netns: str, host: str, port: int) -> socket.socket:
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        setns(target)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    finally:
        setns(own)  # upstream connections from the root namespace
        os.close(own)
        os.close(target)
    return sock


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(ConnectionError):
            writer.close()


def names_portal(lines: list[bytes], portal: str) -> bool:
    """Whether the request's Host header names the portal (with or without a port)."""
    for ln in lines[1:]:
        if ln.lower().startswith(b"host:"):
            host = ln.split(b":", 1)[1].strip().decode("latin-1")
            return host == portal or host.startswith(portal + ":")
    return False


async def handle(reader, writer, upstream: tuple[str, int], captive: str | None = None) -> None:
    peer = writer.get_extra_info("peername")[0]
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    lines = head[:-4].split(b"\r\n")
    if captive is not None and not names_portal(lines, captive):
        # Like production nginx's default_server: a walled device's HTTP to any other name or
        # address, DNATed here by the firewall, is sent to the "not registered" page.
        location = f"http://{captive}/unregistered/".encode()
        writer.write(
            b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\n"
            b"Content-Length: 0\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        writer.close()
        return
    forwarded = [
        ln.split(b":", 1)[1].strip()
        for ln in lines[1:]
        if ln.lower().startswith(b"x-forwarded-for:")
    ]
    kept = [lines[0]] + [ln for ln in lines[1:] if not ln.lower().startswith(HOP_BY_HOP)]
    chain = b", ".join([*forwarded, peer.encode()])
    kept += [b"X-Forwarded-For: " + chain, b"Connection: close"]
    try:
        up_reader, up_writer = await asyncio.open_connection(*upstream)
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        return
    up_writer.write(b"\r\n".join(kept) + b"\r\n\r\n")
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--netns", required=True)
    parser.add_argument("--listen", required=True, help="ADDRESS:PORT inside the namespace")
    parser.add_argument("--to", required=True, help="ADDRESS:PORT in the root namespace")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    up_host, up_port = args.to.rsplit(":", 1)
    sock = listening_socket(args.netns, host, int(port))
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, (up_host, int(up_port)), host), sock=sock, limit=MAX_HEAD
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
