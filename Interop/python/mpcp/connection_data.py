"""§9.3 connection data: the blob a peer makes for another peer to dial it."""
from dataclasses import dataclass
from typing import List, Optional

from .encodings import PeerID, Endpoint
from .wire import Reader, ProtocolViolation, u8

MAGIC = b"MPCD"
MAX_LEN = 512


@dataclass
class ConnectionData:
    preference: int
    token: bytes
    for_peer: bytes                 # 16-byte identifier
    peer_id: PeerID
    fingerprint: Optional[bytes]    # SHA-256 of the maker's leaf DER, or None
    endpoints: List[Endpoint]

    @property
    def has_identity(self):
        return self.fingerprint is not None

    def encode(self) -> bytes:
        if not (1 <= len(self.endpoints) <= 8):
            raise ValueError("1-8 endpoints")
        out = (MAGIC + bytes([1, self.preference, 1 if self.has_identity else 0, 0])
               + self.token + self.for_peer + self.peer_id.encode())
        out += u8(32) + self.fingerprint if self.fingerprint is not None else u8(0)
        out += u8(len(self.endpoints)) + b"".join(e.encode() for e in self.endpoints)
        if len(out) > MAX_LEN:
            raise ValueError("connection data too long")
        return out

    @staticmethod
    def decode(data: bytes) -> "ConnectionData":
        if len(data) > MAX_LEN:
            raise ProtocolViolation("connection data too long")
        r = Reader(data)
        if r.take(4) != MAGIC:
            raise ProtocolViolation("connection data magic")
        version, pref, flags, reserved = r.u8(), r.u8(), r.u8(), r.u8()
        if version != 1 or pref > 2 or flags & ~1 or reserved:
            raise ProtocolViolation("connection data header")
        token, for_peer = r.take(16), r.take(16)
        pid = PeerID.read(r)
        n = r.u8()
        if n not in (0, 32) or (n == 32) != bool(flags & 1):
            raise ProtocolViolation("fingerprint presence")
        fp = r.take(32) if n else None
        count = r.u8()
        if not (1 <= count <= 8):
            raise ProtocolViolation("endpoint count")
        eps = [Endpoint.read(r) for _ in range(count)]
        r.end()
        return ConnectionData(pref, token, for_peer, pid, fp, eps)
