#!/usr/bin/env python3
"""Lets a plain TLS client (openssl s_client) reach a library listener: MPCP puts a clear-text
preamble before TLS (docs/PROTOCOL.md §3), which s_client cannot send. Listens on 127.0.0.1,
prints "RELAY <port>", takes one client, dials the listener, exchanges preambles on the client's
behalf (encryption required, no identity), then copies bytes both ways, untouched, until either
side closes. Every wait is bounded (--seconds, default 15, for the whole run).

    preamble_relay.py LISTENER_PORT [--seconds N]
"""
import argparse
import selectors
import socket
import sys
import time

PREAMBLE = b"MPCP" + bytes([1, 1, 1, 0])  # versions 1-1, required, hasIdentity clear


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("listener_port", type=int)
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    deadline = time.monotonic() + args.seconds

    def left():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            sys.exit("preamble_relay: out of time")
        return remaining

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    print(f"RELAY {server.getsockname()[1]}", flush=True)
    server.settimeout(left())
    client, _ = server.accept()
    server.close()
    listener = socket.create_connection(("127.0.0.1", args.listener_port), timeout=left())
    listener.sendall(PREAMBLE)
    theirs = b""
    while len(theirs) < len(PREAMBLE):
        listener.settimeout(left())
        chunk = listener.recv(len(PREAMBLE) - len(theirs))
        if not chunk:
            sys.exit("preamble_relay: the listener closed during the preambles")
        theirs += chunk
    if theirs[:4] != b"MPCP":
        sys.exit(f"preamble_relay: not an MPCP preamble: {theirs.hex()}")
    print(f"PREAMBLE {theirs.hex()}", flush=True)

    peer = {client: listener, listener: client}
    selector = selectors.DefaultSelector()
    for sock in peer:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select(timeout=left()):
            try:
                data = key.fileobj.recv(65536)
            except ConnectionError:
                return
            if not data:
                return  # one side closed: the exchange is over
            peer[key.fileobj].setblocking(True)
            peer[key.fileobj].settimeout(left())
            peer[key.fileobj].sendall(data)
            peer[key.fileobj].setblocking(False)


if __name__ == "__main__":
    main()
