"""§8 datagrams: header, XChaCha20-Poly1305 sealing, and the replay window."""
import struct
from dataclasses import dataclass

from nacl.bindings import (crypto_aead_xchacha20poly1305_ietf_encrypt,
                           crypto_aead_xchacha20poly1305_ietf_decrypt)
from nacl.exceptions import CryptoError

KIND_SEALED, KIND_PLAIN = 0x01, 0x02
HEADER_LEN = 20
TAG_LEN = 16
MAX_UDP = 65507
MAX_SEALED_MESSAGE = 65471
MAX_PLAIN_MESSAGE = 65487
LABEL_D2L = b"MPCP datagram v1 dialer-to-listener"
LABEL_L2D = b"MPCP datagram v1 listener-to-dialer"


@dataclass
class DatagramHeader:
    kind: int
    receiver_id: int
    epoch: int
    counter: int

    def encode(self) -> bytes:
        return struct.pack(">B3sIIQ", self.kind, b"\0\0\0", self.receiver_id, self.epoch, self.counter)

    @staticmethod
    def decode(data: bytes):
        """Returns the header, or None for a datagram rule 1 drops."""
        if len(data) < HEADER_LEN or len(data) > MAX_UDP:
            return None
        kind, reserved, rid, epoch, counter = struct.unpack(">B3sIIQ", data[:HEADER_LEN])
        if kind not in (KIND_SEALED, KIND_PLAIN) or reserved != b"\0\0\0":
            return None
        if kind == KIND_SEALED and len(data) < HEADER_LEN + TAG_LEN:
            return None
        return DatagramHeader(kind, rid, epoch, counter)


def nonce(epoch: int, counter: int) -> bytes:
    return bytes(12) + struct.pack(">IQ", epoch, counter)


def seal(key: bytes, receiver_id: int, epoch: int, counter: int, message: bytes) -> bytes:
    header = DatagramHeader(KIND_SEALED, receiver_id, epoch, counter).encode()
    return header + crypto_aead_xchacha20poly1305_ietf_encrypt(message, header, nonce(epoch, counter), key)


def open_sealed(key: bytes, data: bytes):
    """Returns the message, or None when the tag fails."""
    header = data[:HEADER_LEN]
    h = DatagramHeader.decode(data)
    try:
        return crypto_aead_xchacha20poly1305_ietf_decrypt(data[HEADER_LEN:], header,
                                                          nonce(h.epoch, h.counter), key)
    except CryptoError:
        return None


def plain(receiver_id: int, epoch: int, counter: int, message: bytes) -> bytes:
    return DatagramHeader(KIND_PLAIN, receiver_id, epoch, counter).encode() + message


class ReplayWindow:
    """Sliding window over counters (§8 rule 4). `check` says whether a counter
    would be accepted; `commit` records it (only after authentication)."""

    def __init__(self, size=8192):
        self.size = size
        self.highest = -1
        self.seen = set()

    def check(self, counter: int) -> bool:
        if counter > self.highest:
            return True
        if counter <= self.highest - self.size:
            return False
        return counter not in self.seen

    def commit(self, counter: int):
        if counter > self.highest:
            self.highest = counter
            floor = self.highest - self.size
            if len(self.seen) > 2 * self.size:
                self.seen = {c for c in self.seen if c > floor}
        self.seen.add(counter)


FAILURE_LIMIT = 2 ** 32


class _Epoch:
    """One accepted epoch of a direction: its key (derived on first use) and
    its replay window."""

    def __init__(self, number, key=None, window_size=8192):
        self.number = number
        self.key = key
        self.window = ReplayWindow(window_size)
        self.failures = 0


class EpochReceiver:
    """§8 rule 2-4 for one direction of one connection.

    Holds the current epoch E (key and window), the previous epoch E-1 (key
    and window, or None before the first advance) and at most one later
    epoch's key (no window: nothing of it was accepted yet). `derive(epoch)`
    returns the key of an epoch; None means a plain (plaintext) connection,
    where nothing is opened and the epoch rules apply to headers alone.

    `receive(header, data)` returns (status, message): status "ok", or why the
    datagram was dropped ("epoch", "replay", "tag"), or "limit" when the
    failed openings of one epoch (later epochs counted together) reached
    `failure_limit`: the connection must then be closed with GOODBYE 6."""

    def __init__(self, derive=None, window_size=8192, failure_limit=FAILURE_LIMIT):
        self.derive = derive
        self.window_size = window_size
        self.failure_limit = failure_limit
        self.current = _Epoch(0, window_size=window_size)
        self.previous = None
        self.later = None              # (epoch, key) of at most one later epoch
        self.later_failures = 0
        self.derivations = 0           # for tests: keys derived so far

    # -- state, for tests and scenarios
    @property
    def epoch(self):
        return self.current.number

    def held_epochs(self):
        """Epochs whose key (or window) is held as current or previous."""
        return {self.current.number} | ({self.previous.number} if self.previous else set())

    # -- internals
    def _derive(self, epoch):
        self.derivations += 1
        return self.derive(epoch)

    def _key(self, slot):
        if slot.key is None and self.derive is not None:
            slot.key = self._derive(slot.number)
        return slot.key

    def _open(self, key, data):
        if self.derive is None:
            return data[HEADER_LEN:]
        return open_sealed(key, data)

    def receive(self, h, data):
        e = h.epoch
        cur, prev = self.current, self.previous
        if e == cur.number or (prev is not None and e == prev.number):
            slot = cur if e == cur.number else prev
            if not slot.window.check(h.counter):
                return "replay", None
            msg = self._open(self._key(slot), data)
            if msg is None:
                slot.failures += 1
                return ("limit" if slot.failures >= self.failure_limit else "tag"), None
            slot.window.commit(h.counter)
            return "ok", msg
        if e < cur.number:
            return "epoch", None                      # before E-1 (or E-1 never held: E = 0)
        # a later epoch: one key slot, replaced by a datagram of another later epoch
        if self.derive is not None and (self.later is None or self.later[0] != e):
            self.later = (e, self._derive(e))
        key = self.later[1] if self.derive is not None else None
        msg = self._open(key, data)
        if msg is None:
            self.later_failures += 1
            return ("limit" if self.later_failures >= self.failure_limit else "tag"), None
        if e == cur.number + 1:
            self.previous = cur                       # keeps its window
        else:
            # every datagram of cur+1 .. e-1 was lost: e-1 is the previous
            # epoch, its key derived (on first use) with an empty window
            self.previous = _Epoch(e - 1, window_size=self.window_size)
        self.current = _Epoch(e, key, self.window_size)
        self.current.window.commit(h.counter)
        self.later = None
        self.later_failures = 0
        return "ok", msg
