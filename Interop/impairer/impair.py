#!/usr/bin/env python3
"""A userspace impairer: an L2 relay between two interfaces that delays, jitters, reorders,
duplicates and drops the frames it forwards. This kernel has no netem, so tests put it in a
network namespace of their own between two others (docs/ADVERSARIAL.md, README.md here).

    impair.py relay --a IFACE --b IFACE [--delay-ms 50] [--jitter-ms 20] [--reorder 5]
                    [--duplicate 5] [--loss 0] [--seed 1] [--seconds 300] [--stats FILE]
    impair.py offloads-off IFACE...

`relay` forwards until standard input closes or --seconds pass, then writes its counts as JSON
to --stats. `offloads-off` turns off checksum, segmentation and receive offloads on the given
interfaces (run it in each namespace): frames must cross the relay whole and with checksums.
Standard library only; Linux; needs CAP_NET_RAW and CAP_NET_ADMIN in its namespace.
"""
import argparse
import ctypes
import fcntl
import heapq
import json
import random
import select
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SIOCETHTOOL = 0x8946
# ethtool "set" commands (linux/ethtool.h): rx and tx checksums, scatter-gather, TSO, GSO, GRO.
OFFLOADS = {"rx": 0x15, "tx": 0x17, "sg": 0x19, "tso": 0x1F, "gso": 0x24, "gro": 0x2C}
# Bounds: what the relay may hold at once; beyond them a frame is dropped and counted.
MAX_HELD_FRAMES = 10_000
MAX_HELD_BYTES = 64 << 20


def offloads_off(interfaces):
    control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for interface in interfaces:
        for name, command in OFFLOADS.items():
            value = ctypes.create_string_buffer(struct.pack("II", command, 0))
            request = struct.pack("16sP", interface.encode(), ctypes.addressof(value)).ljust(40, b"\0")
            try:
                fcntl.ioctl(control.fileno(), SIOCETHTOOL, request)
            except OSError as error:
                # Some drivers refuse some settings (veth cannot turn rx checksumming off everywhere).
                print(f"offloads-off: {interface} {name}: {error}", file=sys.stderr)
    control.close()


class Relay:
    def __init__(self, options):
        self.options = options
        self.random = random.Random(options.seed)
        self.sockets = {}
        for side in ("a", "b"):
            raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            raw.bind((getattr(options, side), 0))
            raw.setblocking(False)
            self.sockets[side] = raw
        self.held = []  # heap of (due, sequence, outgoing side, frame)
        self.held_bytes = 0
        self.sequence = 0
        zero = {"received": 0, "forwarded": 0, "delayed": 0, "reordered": 0, "duplicated": 0, "dropped": 0, "overflow": 0}
        self.stats = {"a->b": dict(zero), "b->a": dict(zero)}

    def hold(self, due, out, frame, direction):
        if len(self.held) >= MAX_HELD_FRAMES or self.held_bytes + len(frame) > MAX_HELD_BYTES:
            self.stats[direction]["overflow"] += 1
            return
        self.sequence += 1
        heapq.heappush(self.held, (due, self.sequence, out, frame, direction))
        self.held_bytes += len(frame)

    def arrived(self, side, frame, now):
        out = "b" if side == "a" else "a"
        direction = f"{side}->{out}"
        counts = self.stats[direction]
        counts["received"] += 1
        o = self.options
        if self.random.random() * 100 < o.loss:
            counts["dropped"] += 1
            return
        delay = max(0.0, o.delay_ms + self.random.uniform(-o.jitter_ms, o.jitter_ms)) / 1000
        if delay > 0:
            counts["delayed"] += 1
        if self.random.random() * 100 < o.reorder:
            # Held back past the frames that follow it.
            delay += (o.delay_ms + o.jitter_ms + self.random.uniform(5, 25)) / 1000
            counts["reordered"] += 1
        self.hold(now + delay, out, frame, direction)
        if self.random.random() * 100 < o.duplicate:
            self.hold(now + delay + self.random.uniform(0, 10) / 1000, out, frame, direction)
            counts["duplicated"] += 1

    def release(self, now):
        while self.held and self.held[0][0] <= now:
            _, _, out, frame, direction = heapq.heappop(self.held)
            self.held_bytes -= len(frame)
            try:
                self.sockets[out].send(frame)
                self.stats[direction]["forwarded"] += 1
            except OSError:
                # A full transmit queue: the frame is lost, as on a congested link.
                self.stats[direction]["overflow"] += 1

    def run(self):
        end = time.monotonic() + self.options.seconds
        readers = {raw.fileno(): side for side, raw in self.sockets.items()}
        watch = list(self.sockets.values()) + [sys.stdin]
        while True:
            now = time.monotonic()
            if now >= end:
                break
            timeout = end - now
            if self.held:
                timeout = max(0.0, min(timeout, self.held[0][0] - now))
            ready, _, _ = select.select(watch, [], [], timeout)
            now = time.monotonic()
            for source in ready:
                if source is sys.stdin:
                    if not sys.stdin.buffer.read1(4096):
                        return  # the test closed our input: done
                    continue
                side = readers[source.fileno()]
                # Bounded: at most 256 frames per socket per turn, so the other side is served too.
                for _ in range(256):
                    try:
                        frame, address = source.recvfrom(65_536)
                    except BlockingIOError:
                        break
                    if address[2] == PACKET_OUTGOING:
                        continue  # our own transmission, seen on the way out
                    self.arrived(side, frame, now)
            self.release(time.monotonic())

    def write_stats(self):
        if self.options.stats:
            with open(self.options.stats, "w") as out:
                json.dump(self.stats, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    relay = commands.add_parser("relay")
    relay.add_argument("--a", required=True)
    relay.add_argument("--b", required=True)
    relay.add_argument("--delay-ms", type=float, default=0)
    relay.add_argument("--jitter-ms", type=float, default=0)
    relay.add_argument("--reorder", type=float, default=0, help="percent of frames held back past later ones")
    relay.add_argument("--duplicate", type=float, default=0, help="percent of frames sent twice")
    relay.add_argument("--loss", type=float, default=0, help="percent of frames dropped")
    relay.add_argument("--seed", type=int, default=1)
    relay.add_argument("--seconds", type=float, default=300, help="hard bound on the run")
    relay.add_argument("--stats", help="where to write the counts, as JSON, when done")
    off = commands.add_parser("offloads-off")
    off.add_argument("interfaces", nargs="+")
    options = parser.parse_args()
    if options.command == "offloads-off":
        offloads_off(options.interfaces)
        return
    if not (0 <= options.seconds <= 3600):
        parser.error("--seconds: 0 to 3600")
    if options.jitter_ms > options.delay_ms:
        parser.error("--jitter-ms may not exceed --delay-ms")
    instance = Relay(options)
    print("relaying", flush=True)
    try:
        instance.run()
    finally:
        instance.write_stats()


if __name__ == "__main__":
    main()
