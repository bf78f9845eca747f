#!/usr/bin/env python3
"""Legacy unicast mDNS queries (RFC 6762 §6.7) to one responder from two source addresses.

    legacy_query.py TARGET OFF_LINK_SOURCE ON_LINK_SOURCE NAME SECONDS [group]

Each round sends a PTR query for NAME from OFF_LINK_SOURCE, then the same from
ON_LINK_SOURCE, each from an ephemeral port, until the on-link one is answered
or SECONDS pass. Prints `ON <answers>` and `OFF <answers>`. With `group`, the
queries go to 224.0.0.251 on ON_LINK_SOURCE's interface instead of TARGET, and
rounds go on until both are answered (a query to the group is on-link whatever
its source, RFC 6762 §11). Both queries cross
the same link to the same socket and both answers come back through the same
next hop, so once an on-link answer is in, an answer to the earlier off-link
query would be in its socket already: the count read then is the evidence.
Standard library only; every wait has a deadline.
"""
import select
import socket
import struct
import sys
import time


def query(ident, name):
    labels = b"".join(bytes([len(label)]) + label.encode() for label in name.strip(".").split("."))
    return struct.pack("!HHHHHH", ident, 0, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", 12, 1)


def is_response(data):
    return len(data) >= 12 and data[2] & 0x80 != 0


def main():
    target, off, on, name, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
    group = sys.argv[6:] == ["group"]
    sockets = {}
    for label, source in (("off", off), ("on", on)):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((source, 0))
        if group:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(on))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        sockets[label] = sock
    destination = ("224.0.0.251" if group else target, 5353)
    answers = {"off": 0, "on": 0}

    def done():
        return answers["on"] > 0 and (answers["off"] > 0 or not group)

    deadline = time.monotonic() + seconds
    ident = 0
    while not done() and time.monotonic() < deadline:
        ident += 1
        sockets["off"].sendto(query(ident, name), destination)
        sockets["on"].sendto(query(ident, name), destination)
        # The responder ignores queries while it probes: ask again every half second.
        round_end = min(deadline, time.monotonic() + 0.5)
        while not done():
            left = round_end - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(sockets.values()), [], [], left)
            for label, sock in sockets.items():
                if sock in ready and is_response(sock.recvfrom(9000)[0]):
                    answers[label] += 1
    # Whatever was sent to the off-link source before the on-link answer is queued now; the
    # short wait is margin, not the evidence.
    while select.select([sockets["off"]], [], [], 0.2)[0]:
        if is_response(sockets["off"].recvfrom(9000)[0]):
            answers["off"] += 1
    print(f"ON {answers['on']}", flush=True)
    print(f"OFF {answers['off']}", flush=True)


if __name__ == "__main__":
    main()
