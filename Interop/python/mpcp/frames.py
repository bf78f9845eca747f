"""§6 frames: the 12-byte header, per-type validation (§6.3) and every payload
(§6.4). `decode_payload` turns a validated frame into a typed value;
`encode_*` helpers build frames."""
import struct
from dataclasses import dataclass
from typing import List, Optional

from .encodings import PeerID, Endpoint
from .wire import Reader, ProtocolViolation, u8, u16, u32, u64, string8, bytes16

HEADER_LEN = 12
MAX_PAYLOAD = 65536
MAX_MESSAGE = 16 * 1024 * 1024

HELLO, TRUST, INVITATION, INVITATION_RESPONSE, MESH_INTRODUCTION = 0x01, 0x02, 0x03, 0x04, 0x05
GOODBYE, PING, PONG, PAIRING_COMMIT, PAIRING_NONCE = 0x06, 0x07, 0x08, 0x09, 0x0A
RESUME, ACK = 0x0B, 0x0C                 # version 2 only (§6.3)
MESSAGE = 0x10
STREAM_OPEN, STREAM_DATA, STREAM_CLOSE, STREAM_RESET, WINDOW_UPDATE = 0x20, 0x21, 0x22, 0x23, 0x24
STREAM_RESUME, STREAM_ACK = 0x25, 0x26  # version 2 with link recovery only (§6.3, §7.10)
RESOURCE_OFFER, RESOURCE_CHUNK, RESOURCE_COMPLETE = 0x30, 0x31, 0x32
RESOURCE_CANCEL, RESOURCE_ACCEPT, RESOURCE_RECEIVED = 0x33, 0x34, 0x35

FLAG_END = 0x01
FLAG_CLOSED = 0x01                       # STREAM_ACK: the stream ended at the receiver (§6.4.13b)
FLAG_RESUMED = 0x01                      # RESOURCE_OFFER: offered again after a lost link (§6.4.14)
FLAG_SEND_ID = 0x02                      # RESOURCE_OFFER: ends with send_id; every offer with link recovery

# type: (name, channel rule ("zero", "nonzero", "any"), allowed flags, min len, max len)
FRAME_TYPES = {
    HELLO: ("HELLO", "zero", 0, 63, 125),
    TRUST: ("TRUST", "zero", 0, 1, 1),
    INVITATION: ("INVITATION", "zero", 0, 6, 4102),
    INVITATION_RESPONSE: ("INVITATION_RESPONSE", "zero", 0, 1, 310),
    MESH_INTRODUCTION: ("MESH_INTRODUCTION", "zero", 0, 27, 601),
    GOODBYE: ("GOODBYE", "zero", 0, 2, 2),
    PING: ("PING", "zero", 0, 8, 8),
    PONG: ("PONG", "zero", 0, 8, 8),
    PAIRING_COMMIT: ("PAIRING_COMMIT", "zero", 0, 32, 32),
    PAIRING_NONCE: ("PAIRING_NONCE", "zero", 0, 32, 32),
    RESUME: ("RESUME", "zero", 0, 40, 40),
    ACK: ("ACK", "zero", 0, 8, 8),
    MESSAGE: ("MESSAGE", "zero", FLAG_END, 0, 65536),
    STREAM_OPEN: ("STREAM_OPEN", "nonzero", 0, 1, 256),
    STREAM_DATA: ("STREAM_DATA", "nonzero", 0, 1, 65536),
    STREAM_CLOSE: ("STREAM_CLOSE", "nonzero", 0, 0, 0),
    STREAM_RESET: ("STREAM_RESET", "nonzero", 0, 2, 2),
    WINDOW_UPDATE: ("WINDOW_UPDATE", "any", 0, 4, 4),
    STREAM_RESUME: ("STREAM_RESUME", "nonzero", 0, 5, 260),
    STREAM_ACK: ("STREAM_ACK", "nonzero", FLAG_CLOSED, 8, 8),
    RESOURCE_OFFER: ("RESOURCE_OFFER", "nonzero", FLAG_RESUMED | FLAG_SEND_ID, 25, 288),
    RESOURCE_CHUNK: ("RESOURCE_CHUNK", "nonzero", 0, 1, 65536),
    RESOURCE_COMPLETE: ("RESOURCE_COMPLETE", "nonzero", 0, 32, 32),
    RESOURCE_CANCEL: ("RESOURCE_CANCEL", "nonzero", 0, 2, 2),
    RESOURCE_ACCEPT: ("RESOURCE_ACCEPT", "nonzero", 0, 8, 8),
    RESOURCE_RECEIVED: ("RESOURCE_RECEIVED", "nonzero", 0, 0, 0),
}

GOODBYE_REASONS = ["normal", "protocolError", "limitExceeded", "flowControlError",
                   "downgradeDetected", "trustRejected", "timedOut", "duplicateConnection",
                   "sessionFull", "unknownToken", "internalError"]

TRUST_ACCEPTED, TRUST_REJECTED, TRUST_TIMED_OUT = 1, 2, 3

PURPOSE_ANSWER, PURPOSE_CONNECTION_DATA, PURPOSE_INVITATION, PURPOSE_MESH = 0, 1, 2, 3
PURPOSE_RESUMPTION = 4                   # version 2 only (§7.9)

# frame types and HELLO purposes a version 1 connection must not carry (§6.3, §6.4.1)
V2_TYPES = (RESUME, ACK, STREAM_RESUME, STREAM_ACK)
# ... and these a connection without link recovery (plaintext) must not carry (§6.3, §7.10)
RECOVERY_TYPES = (STREAM_RESUME, STREAM_ACK)
LATEST_VERSION = 2


def type_name(t):
    return FRAME_TYPES.get(t, ("0x%02x" % t,))[0]


@dataclass
class FrameHeader:
    type: int
    flags: int
    channel: int
    length: int


def encode_header(ftype, length, channel=0, flags=0) -> bytes:
    return struct.pack(">BBHII", ftype, flags, 0, channel, length)


def decode_header(data: bytes, version: int = LATEST_VERSION, recovery: bool = True) -> FrameHeader:
    """Validates a header as §6.1 says, before any payload is buffered.
    `version` is the connection's negotiated version: RESUME, ACK,
    STREAM_RESUME and STREAM_ACK are violations on version 1 (§6.3), and the
    last two and RESOURCE_OFFER's RESUMED and SEND_ID flags also where
    `recovery` is False (no link recovery: plaintext). With link recovery
    (version 2 and `recovery`) a RESOURCE_OFFER without SEND_ID is one
    (§6.4.14). The defaults are a version 2 connection with link recovery."""
    ftype, flags, reserved, channel, length = struct.unpack(">BBHII", data)
    spec = FRAME_TYPES.get(ftype)
    if spec is None or (version < 2 and ftype in V2_TYPES):
        raise ProtocolViolation("unknown frame type 0x%02x for version %d" % (ftype, version))
    if not recovery and ftype in RECOVERY_TYPES:
        raise ProtocolViolation("%s without link recovery" % spec[0])
    _, rule, allowed, lo, hi = spec
    if ftype == RESOURCE_OFFER:
        with_recovery = version >= 2 and recovery
        if flags & FLAG_RESUMED and not with_recovery:
            raise ProtocolViolation("RESOURCE_OFFER RESUMED without link recovery")
        if flags & FLAG_SEND_ID and not with_recovery:
            raise ProtocolViolation("RESOURCE_OFFER SEND_ID without link recovery")
        if with_recovery and not flags & FLAG_SEND_ID:
            raise ProtocolViolation("RESOURCE_OFFER without SEND_ID on a connection with link recovery")
    if flags & ~allowed:
        raise ProtocolViolation("disallowed flags")
    if reserved:
        raise ProtocolViolation("reserved header field")
    if rule == "zero" and channel != 0:
        raise ProtocolViolation("channel must be 0")
    if rule == "nonzero" and channel == 0:
        raise ProtocolViolation("channel must be non-zero")
    if not (lo <= length <= hi):
        raise ProtocolViolation("payload length %d out of bounds for %s" % (length, spec[0]))
    return FrameHeader(ftype, flags, channel, length)


def frame(ftype, payload=b"", channel=0, flags=0) -> bytes:
    return encode_header(ftype, len(payload), channel, flags) + payload


# ---- typed payloads ---------------------------------------------------------

@dataclass
class Hello:
    version: int
    purpose: int
    preamble_echo: bytes
    token: bytes
    listen_port: int
    datagram_port: int
    datagram_receiver_id: int
    peer_id: PeerID

    def encode_payload(self):
        return (u8(self.version) + u8(self.purpose) + u16(0) + self.preamble_echo + self.token
                + u16(self.listen_port) + u16(self.datagram_port) + u32(self.datagram_receiver_id)
                + self.peer_id.encode())

    @staticmethod
    def decode(r: Reader, conn_version: int = LATEST_VERSION):
        version, purpose, reserved = r.u8(), r.u8(), r.u16()
        if reserved:
            raise ProtocolViolation("HELLO reserved")
        if purpose > 4 or (purpose == PURPOSE_RESUMPTION and conn_version < 2):
            raise ProtocolViolation("HELLO purpose %d on version %d" % (purpose, conn_version))
        echo, token = r.take(16), r.take(16)
        if purpose in (0, 2) and any(token):
            raise ProtocolViolation("HELLO token with purpose 0/2")
        listen, dport, rid = r.u16(), r.u16(), r.u32()
        if (dport == 0) != (rid == 0):
            raise ProtocolViolation("HELLO datagram port/receiver ID")
        return Hello(version, purpose, echo, token, listen, dport, rid, PeerID.read(r))


@dataclass
class Invitation:
    timeout_ms: int
    context: bytes

    def encode_payload(self):
        return u32(self.timeout_ms) + bytes16(self.context)

    @staticmethod
    def decode(r):
        t = r.u32()
        if not (1 <= t <= 3_600_000):
            raise ProtocolViolation("invitation timeout")
        ctx = r.bytes16(4096)
        return Invitation(t, ctx)


@dataclass
class InvitationResponse:
    response: int
    connection_data: Optional[bytes] = None

    def encode_payload(self):
        if self.response == 1:
            return u8(1) + bytes16(self.connection_data)
        return u8(self.response)

    @staticmethod
    def decode(r):
        resp = r.u8()
        if resp not in (1, 2, 3, 4, 5):
            raise ProtocolViolation("invitation response value")
        if resp == 1:
            data = r.bytes16(307)
            if not data:
                raise ProtocolViolation("accepted without connection data")
            return InvitationResponse(1, data)
        return InvitationResponse(resp)


@dataclass
class MeshIntroduction:
    entries: List[tuple]  # (PeerID, Endpoint)

    def encode_payload(self):
        out = u8(len(self.entries))
        for pid, ep in self.entries:
            out += pid.encode() + ep.encode(allow_port_zero=True)
        return out

    @staticmethod
    def decode(r):
        n = r.u8()
        if n == 0:
            raise ProtocolViolation("mesh introduction without entries")
        if n > 6:
            raise ProtocolViolation("more than 6 mesh entries", reason=2)
        return MeshIntroduction([(PeerID.read(r), Endpoint.read(r, allow_port_zero=True))
                                 for _ in range(n)])


@dataclass
class ResourceOffer:
    """§6.4.14. `send_id` is present (not None) exactly on a connection with
    link recovery, where the frame carries SEND_ID: the sender's number for
    this send, the same on every offer of the transfer (§7.9)."""
    size: int
    transfer_id: bytes
    name: str
    send_id: Optional[int] = None

    @property
    def flags(self):
        """The flags this payload needs (SEND_ID with a send ID); RESUMED is the caller's."""
        return FLAG_SEND_ID if self.send_id is not None else 0

    @property
    def key(self):
        """What a receiver matches a resumed offer by (§7.9): send ID and content."""
        return (self.send_id, bytes(self.transfer_id), self.size)

    def encode_payload(self):
        out = u64(self.size) + self.transfer_id + string8(self.name)
        if self.send_id is not None:
            out += u64(self.send_id)
        return out

    @staticmethod
    def decode(r, send_id=False):
        size = r.u64()
        if size > 1 << 40:
            raise ProtocolViolation("resource size", reason=2)
        tid, name = r.take(16), r.string8()
        return ResourceOffer(size, tid, name, r.u64() if send_id else None)


def offer_frame(offer: ResourceOffer, channel: int, resumed=False) -> bytes:
    """RESOURCE_OFFER for `offer` on `channel`: SEND_ID when it has a send ID,
    RESUMED if `resumed`."""
    return frame(RESOURCE_OFFER, offer.encode_payload(), channel,
                 offer.flags | (FLAG_RESUMED if resumed else 0))


@dataclass
class Resume:
    """§6.4.7a: the proof of §7.9 and the sender's delivered count."""
    proof: bytes
    delivered: int

    def encode_payload(self):
        return self.proof + u64(self.delivered)

    @staticmethod
    def decode(r):
        return Resume(r.take(32), r.u64())


@dataclass
class StreamResume:
    """§6.4.13a: the stream's ordinal in the sender's session and its name."""
    ordinal: int
    name: str

    def encode_payload(self):
        return u32(self.ordinal) + string8(self.name)

    @staticmethod
    def decode(r):
        return StreamResume(r.u32(), r.string8())


@dataclass
class Frame:
    """A decoded frame. `value` is the typed payload (or raw bytes / int)."""
    type: int
    flags: int
    channel: int
    value: object = None
    raw: bytes = b""

    @property
    def name(self):
        return type_name(self.type)


def decode_payload(h: FrameHeader, payload: bytes, version: int = LATEST_VERSION) -> Frame:
    r = Reader(payload)
    t = h.type
    if t == HELLO:
        v = Hello.decode(r, version)
    elif t == RESUME:
        v = Resume.decode(r)
    elif t in (ACK, STREAM_ACK):
        v = r.u64()
    elif t == STREAM_RESUME:
        v = StreamResume.decode(r)
    elif t == TRUST:
        v = r.u8()
        if v not in (1, 2, 3):
            raise ProtocolViolation("TRUST value")
    elif t == INVITATION:
        v = Invitation.decode(r)
    elif t == INVITATION_RESPONSE:
        v = InvitationResponse.decode(r)
    elif t == MESH_INTRODUCTION:
        v = MeshIntroduction.decode(r)
    elif t in (GOODBYE, STREAM_RESET, RESOURCE_CANCEL):
        v = r.u16()
    elif t in (PING, PONG, PAIRING_COMMIT, PAIRING_NONCE, RESOURCE_COMPLETE):
        v = r.take(r.remaining())
    elif t in (MESSAGE, STREAM_DATA, RESOURCE_CHUNK):
        v = r.take(r.remaining())
    elif t == STREAM_OPEN:
        v = r.string8()
    elif t in (STREAM_CLOSE, RESOURCE_RECEIVED):
        v = None
    elif t == WINDOW_UPDATE:
        v = r.u32()
        if not (1 <= v <= 0x7FFFFFFF):
            raise ProtocolViolation("WINDOW_UPDATE increment")
    elif t == RESOURCE_OFFER:
        v = ResourceOffer.decode(r, bool(h.flags & FLAG_SEND_ID))
    elif t == RESOURCE_ACCEPT:
        v = r.u64()
    else:  # pragma: no cover - header validation excludes this
        raise ProtocolViolation("unknown type")
    r.end()
    return Frame(t, h.flags, h.channel, v, payload)


def decode_frame(data: bytes, version: int = LATEST_VERSION, recovery: bool = True) -> Frame:
    """Decode exactly one whole frame (used by the tests)."""
    if len(data) < HEADER_LEN:
        raise ProtocolViolation("short frame")
    h = decode_header(data[:HEADER_LEN], version, recovery)
    if len(data) != HEADER_LEN + h.length:
        raise ProtocolViolation("frame length mismatch")
    return decode_payload(h, data[HEADER_LEN:], version)


def encode_frame(f: Frame) -> bytes:
    """Inverse of decode_payload."""
    t, v = f.type, f.value
    if t == RESOURCE_OFFER and bool(f.flags & FLAG_SEND_ID) != (v.send_id is not None):
        raise ValueError("RESOURCE_OFFER: SEND_ID flag and send_id disagree")
    if t in (HELLO, INVITATION, INVITATION_RESPONSE, MESH_INTRODUCTION, RESOURCE_OFFER, RESUME, STREAM_RESUME):
        p = v.encode_payload()
    elif t == TRUST:
        p = u8(v)
    elif t in (GOODBYE, STREAM_RESET, RESOURCE_CANCEL):
        p = u16(v)
    elif t == WINDOW_UPDATE:
        p = u32(v)
    elif t in (RESOURCE_ACCEPT, ACK, STREAM_ACK):
        p = u64(v)
    elif t == STREAM_OPEN:
        p = string8(v)
    elif t in (STREAM_CLOSE, RESOURCE_RECEIVED):
        p = b""
    else:
        p = v
    return frame(t, p, f.channel, f.flags)


class FrameParser:
    """Incremental parser: feed bytes, get whole frames. Validates each header
    before buffering its payload (§6.1)."""

    def __init__(self, version: int = LATEST_VERSION, recovery: bool = True):
        self.version = version
        self.recovery = recovery
        self.buf = bytearray()
        self.header = None

    def feed(self, data: bytes):
        self.buf += data
        out = []
        while True:
            if self.header is None:
                if len(self.buf) < HEADER_LEN:
                    break
                self.header = decode_header(bytes(self.buf[:HEADER_LEN]), self.version, self.recovery)
                del self.buf[:HEADER_LEN]
            if len(self.buf) < self.header.length:
                break
            payload = bytes(self.buf[:self.header.length])
            del self.buf[:self.header.length]
            h, self.header = self.header, None
            out.append(decode_payload(h, payload, self.version))
        return out
