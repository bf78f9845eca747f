"""Primitive encodings of §1: big-endian integers, string8, bytes16, and a
strict reader that rejects truncated input and trailing bytes."""
import struct


class ProtocolViolation(Exception):
    """A peer sent something §1-§10 forbid. `reason` is the GOODBYE reason."""

    def __init__(self, message, reason=1):
        super().__init__(message)
        self.reason = reason


class Reader:
    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation("truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack(">H", self.take(2))[0]

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def string8(self, min_len=0, max_len=255) -> str:
        raw = self.take(self.u8())
        if not (min_len <= len(raw) <= max_len):
            raise ProtocolViolation("string length out of range")
        try:
            return raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            raise ProtocolViolation("ill-formed UTF-8")

    def bytes16(self, max_len=65535) -> bytes:
        n = self.u16()
        if n > max_len:
            raise ProtocolViolation("bytes16 too long", reason=2)
        return self.take(n)

    def remaining(self):
        return len(self.data) - self.pos

    def end(self):
        if self.pos != len(self.data):
            raise ProtocolViolation("trailing bytes")


def u8(v):
    return struct.pack(">B", v)


def u16(v):
    return struct.pack(">H", v)


def u32(v):
    return struct.pack(">I", v)


def u64(v):
    return struct.pack(">Q", v)


def string8(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 255:
        raise ValueError("string8 too long")
    return u8(len(raw)) + raw


def bytes16(b: bytes) -> bytes:
    if len(b) > 65535:
        raise ValueError("bytes16 too long")
    return u16(len(b)) + b
