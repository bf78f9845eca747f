"""§9.1 peer ID and §9.2 endpoint."""
import ipaddress
import os
from dataclasses import dataclass

from .wire import Reader, ProtocolViolation, u8, u16, string8


@dataclass(frozen=True)
class PeerID:
    identifier: bytes
    display_name: str

    @staticmethod
    def new(name: str) -> "PeerID":
        return PeerID(os.urandom(16), name)

    def encode(self) -> bytes:
        raw = self.display_name.encode("utf-8")
        if not (1 <= len(raw) <= 63) or len(self.identifier) != 16:
            raise ValueError("invalid peer ID")
        return u8(1) + self.identifier + string8(self.display_name)

    @staticmethod
    def read(r: Reader) -> "PeerID":
        if r.u8() != 1:
            raise ProtocolViolation("peer ID encodingVersion")
        ident = r.take(16)
        name = r.string8(1, 63)
        return PeerID(ident, name)

    @staticmethod
    def decode(data: bytes) -> "PeerID":
        r = Reader(data)
        p = PeerID.read(r)
        r.end()
        return p

    def hex(self) -> str:
        return self.encode().hex()

    def __str__(self):
        return f"{self.display_name}({self.identifier.hex()[:8]})"


@dataclass(frozen=True)
class Endpoint:
    host: str          # textual IPv4 or IPv6 address
    port: int

    def encode(self, allow_port_zero=False) -> bytes:
        if not (1 <= self.port <= 65535) and not (allow_port_zero and self.port == 0):
            raise ValueError("endpoint port")
        ip = ipaddress.ip_address(self.host)
        family = 4 if ip.version == 4 else 6
        return u8(family) + ip.packed + u16(self.port)

    @staticmethod
    def read(r: Reader, allow_port_zero=False) -> "Endpoint":
        family = r.u8()
        if family == 4:
            addr = ipaddress.IPv4Address(r.take(4))
        elif family == 6:
            addr = ipaddress.IPv6Address(r.take(16))
        else:
            raise ProtocolViolation("endpoint family")
        port = r.u16()
        if port == 0 and not allow_port_zero:
            raise ProtocolViolation("endpoint port 0")
        return Endpoint(str(addr), port)

    @property
    def is_link_local(self):
        return ipaddress.ip_address(self.host).is_link_local
