"""Tiny traffic tool run inside the lab namespaces (`ip netns exec NS python netpeer.py ...`).

Every mode is bounded: sockets have timeouts and servers exit after `--seconds`.
  serve   ADDR PORT [--udp] [--mode peer|echo|stream] : print "ready", answer each client
  connect ADDR PORT [--udp] [--bind SRC]              : print the server's first reply line
  download ADDR PORT [--bind SRC] [--skip S]          : read a stream, print received bits/s
  hold    ADDR PORT [--bind SRC]                      : echo client driven by stdin lines
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import threading
import time


def family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def serve(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.seconds
    kind = socket.SOCK_DGRAM if args.udp else socket.SOCK_STREAM
    srv = socket.socket(family(args.addr), kind)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.addr, args.port))
    if not args.udp:
        srv.listen(16)
    srv.settimeout(0.2)
    out("ready")
    while time.monotonic() < deadline:
        try:
            if args.udp:
                _data, peer = srv.recvfrom(2048)
                out(f"peer={peer[0]}")
                srv.sendto(f"peer={peer[0]}\n".encode(), peer)
                continue
            conn, peer = srv.accept()
        except TimeoutError:
            continue
        out(f"peer={peer[0]}")
        threading.Thread(target=handle, args=(conn, peer[0], args), daemon=True).start()


def handle(conn: socket.socket, peer: str, args: argparse.Namespace) -> None:
    conn.settimeout(10)
    try:
        if args.mode == "peer":
            conn.sendall(f"peer={peer}\n".encode())
        elif args.mode == "echo":
            while data := conn.recv(4096):
                conn.sendall(data)
        elif args.mode == "stream":
            chunk = b"x" * 16384
            end = time.monotonic() + args.stream_seconds
            while time.monotonic() < end:
                conn.sendall(chunk)
    except OSError:
        pass
    finally:
        conn.close()


def client(args: argparse.Namespace) -> socket.socket:
    kind = socket.SOCK_DGRAM if args.udp else socket.SOCK_STREAM
    sock = socket.socket(family(args.addr), kind)
    sock.settimeout(args.timeout)
    if args.bind:
        sock.bind((args.bind, 0))
    sock.connect((args.addr, args.port))
    return sock


def connect(args: argparse.Namespace) -> int:
    try:
        sock = client(args)
        if args.udp:
            sock.send(b"hello\n")
        reply = sock.recv(200).decode().strip()
    except OSError as exc:
        out(f"ERROR {type(exc).__name__}: {exc}")
        return 1
    out(reply)
    return 0


def download(args: argparse.Namespace) -> int:
    sock = client(args)
    start = time.monotonic()
    counted = 0
    t_first = None
    t_last = start
    while data := sock.recv(65536):
        now = time.monotonic()
        if now - start >= args.skip:
            if t_first is None:
                t_first = now
            else:
                counted += len(data)
            t_last = now
    if t_first is None or t_last <= t_first:
        out(json.dumps({"error": "no data after the skipped start"}))
        return 1
    out(
        json.dumps(
            {"bits_per_second": counted * 8 / (t_last - t_first), "seconds": t_last - t_first}
        )
    )
    return 0


def hold(args: argparse.Namespace) -> int:
    sock = client(args)
    out("connected")
    for line in sys.stdin:
        try:
            sock.sendall(line.encode())
            ready, _, _ = select.select([sock], [], [], args.timeout)
            out(sock.recv(4096).decode().strip() if ready else "TIMEOUT")
        except OSError as exc:
            out(f"ERROR {exc}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve", "connect", "download", "hold"])
    parser.add_argument("addr")
    parser.add_argument("port", type=int)
    parser.add_argument("--udp", action="store_true")
    parser.add_argument("--bind")
    parser.add_argument("--mode", default="peer", choices=["peer", "echo", "stream"])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--stream-seconds", type=float, default=3.5)
    parser.add_argument("--skip", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=1.5)
    args = parser.parse_args()
    if args.command == "serve":
        serve(args)
        return 0
    return {"connect": connect, "download": download, "hold": hold}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
