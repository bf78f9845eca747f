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
