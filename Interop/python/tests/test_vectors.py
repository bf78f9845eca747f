"""Codec tests against docs/PROTOCOL.md §11 (read straight from the spec).
Each vector is decoded, compared with the value the spec describes, and
re-encoded to the same bytes. Run with pytest."""
import hashlib
import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mpcp import frames as F                                  # noqa: E402
from mpcp import datagram as D                                # noqa: E402
from mpcp.connection_data import ConnectionData               # noqa: E402
from mpcp.encodings import PeerID, Endpoint                   # noqa: E402
from mpcp.preamble import Preamble, negotiate_encryption, OPTIONAL, REQUIRED, NONE, TLS, PLAINTEXT, REFUSED  # noqa
from mpcp.wire import ProtocolViolation                       # noqa: E402
from mpcp import pairing                                      # noqa: E402
from mpcp import resumption                                   # noqa: E402

SPEC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "PROTOCOL.md"


def load_vectors():
    text = SPEC.read_text()
    block = text.split("<!-- vectors:begin -->")[1].split("<!-- vectors:end -->")[0]
    out = {}
    for m in re.finditer(r"### (\S+)\n\n(.*?)\((\d+) bytes\)\n\n```hex\n(.*?)```", block, re.S):
        name, _, n, hexdata = m.groups()
        data = bytes.fromhex("".join(hexdata.split()))
        assert len(data) == int(n), name
        out[name] = data
    return out


V = load_vectors()
ALICE = PeerID(bytes(range(16)), "alice")
BOB = PeerID(bytes(range(0xF0, 0x100)), "bob")
TOKEN = bytes(range(0x10, 0x20))
DIALER_PRE = Preamble(OPTIONAL, True)
LISTENER_PRE = Preamble(REQUIRED, True)
ECHO = DIALER_PRE.encode() + LISTENER_PRE.encode()
ALICE_FOR_BOB = ConnectionData(REQUIRED, TOKEN, BOB.identifier, ALICE, hashlib.sha256(b"alice").digest(),
                               [Endpoint("127.0.0.1", 50001), Endpoint("::1", 50001)])


def test_all_vectors_found():
    assert len(V) >= 30


@pytest.mark.parametrize("name,value", [
    ("preamble-optional-identity", Preamble(OPTIONAL, True)),
    ("preamble-required-identity", Preamble(REQUIRED, True)),
    ("preamble-none-no-identity", Preamble(NONE, False)),
])
def test_preambles(name, value):
    assert Preamble.decode(V[name]) == value
    assert value.encode() == V[name]


def test_peer_id():
    assert PeerID.decode(V["peer-id-alice"]) == ALICE
    assert ALICE.encode() == V["peer-id-alice"]


def test_connection_data():
    cd = ConnectionData.decode(V["connection-data-alice-for-bob"])
    assert cd == ALICE_FOR_BOB
    assert cd.encode() == V["connection-data-alice-for-bob"]


def test_datagram_header():
    h = D.DatagramHeader.decode(V["datagram-header-sealed"] + bytes(16))
    assert (h.kind, h.receiver_id, h.epoch, h.counter) == (1, 0x01020304, 2, 5)
    assert h.encode() == V["datagram-header-sealed"]


NONCE = bytes(range(32))
FRAME_VALUES = {
    "frame-hello-connection-data": F.Frame(F.HELLO, 0, 0, F.Hello(1, 1, ECHO, TOKEN, 50001, 50002, 0x01020304, ALICE)),
    "frame-hello-answer": F.Frame(F.HELLO, 0, 0, F.Hello(1, 0, ECHO, bytes(16), 50003, 0, 0, BOB)),
    "frame-trust-accepted": F.Frame(F.TRUST, 0, 0, 1),
    "frame-invitation": F.Frame(F.INVITATION, 0, 0, F.Invitation(30000, b"game=1")),
    "frame-invitation-response-declined": F.Frame(F.INVITATION_RESPONSE, 0, 0, F.InvitationResponse(2)),
    "frame-invitation-response-accepted": F.Frame(F.INVITATION_RESPONSE, 0, 0,
                                                  F.InvitationResponse(1, ALICE_FOR_BOB.encode())),
    "frame-mesh-introduction": F.Frame(F.MESH_INTRODUCTION, 0, 0, F.MeshIntroduction(
        [(BOB, Endpoint("127.0.0.1", 50003)), (ALICE, Endpoint("::1", 50001))])),
    "frame-goodbye-duplicate-connection": F.Frame(F.GOODBYE, 0, 0, 7),
    "frame-pairing-commit": F.Frame(F.PAIRING_COMMIT, 0, 0, pairing.commitment(NONCE)),
    "frame-pairing-nonce": F.Frame(F.PAIRING_NONCE, 0, 0, NONCE),
    "frame-hello-resumption": F.Frame(F.HELLO, 0, 0, F.Hello(2, 4, ECHO, bytes(range(0x60, 0x70)), 50001, 50002,
                                                             0x01020304, ALICE)),
    "frame-resume": F.Frame(F.RESUME, 0, 0, F.Resume(
        resumption.proof(bytes(range(0xC0, 0xE0)), 0, bytes(range(0x40, 0x60))), 0x0102030405060708)),
    "frame-acknowledge": F.Frame(F.ACK, 0, 0, 0x0102030405060708),
    "frame-ping": F.Frame(F.PING, 0, 0, bytes(range(1, 9))),
    "frame-pong": F.Frame(F.PONG, 0, 0, bytes(range(1, 9))),
    "frame-message-end": F.Frame(F.MESSAGE, 1, 0, b"hello"),
    "frame-message-fragment": F.Frame(F.MESSAGE, 0, 0, b"hel"),
    "frame-message-empty": F.Frame(F.MESSAGE, 1, 0, b""),
    "frame-stream-open": F.Frame(F.STREAM_OPEN, 0, 1, "chat"),
    "frame-stream-resume": F.Frame(F.STREAM_RESUME, 0, 3, F.StreamResume(2, "chat")),
    "frame-stream-ack": F.Frame(F.STREAM_ACK, 0, 1, 262144),
    "frame-stream-ack-closed": F.Frame(F.STREAM_ACK, F.FLAG_CLOSED, 1, 3),
    "frame-stream-data": F.Frame(F.STREAM_DATA, 0, 1, b"abc"),
    "frame-stream-close": F.Frame(F.STREAM_CLOSE, 0, 1, None),
    "frame-stream-reset": F.Frame(F.STREAM_RESET, 0, 2, 1),
    "frame-window-update": F.Frame(F.WINDOW_UPDATE, 0, 0, 65536),
    "frame-resource-offer": F.Frame(F.RESOURCE_OFFER, 0, 3, F.ResourceOffer(1 << 20, bytes(range(16)), "photo.jpg")),
    "frame-resource-offer-send-id": F.Frame(F.RESOURCE_OFFER, F.FLAG_SEND_ID, 3,
                                            F.ResourceOffer(1 << 20, bytes(range(16)), "photo.jpg",
                                                            0x1122334455667788)),
    "frame-resource-offer-resumed": F.Frame(F.RESOURCE_OFFER, F.FLAG_RESUMED | F.FLAG_SEND_ID, 5,
                                            F.ResourceOffer(1 << 20, bytes(range(16)), "photo.jpg",
                                                            0x1122334455667788)),
    "frame-resource-chunk": F.Frame(F.RESOURCE_CHUNK, 0, 3, b"\x00\xff"),
    "frame-resource-complete": F.Frame(F.RESOURCE_COMPLETE, 0, 3, hashlib.sha256(b"").digest()),
    "frame-resource-cancel": F.Frame(F.RESOURCE_CANCEL, 0, 3, 1),
    "frame-resource-accept": F.Frame(F.RESOURCE_ACCEPT, 0, 3, 262144),
    "frame-resource-received": F.Frame(F.RESOURCE_RECEIVED, 0, 3, None),
}


# the connection a vector belongs to, where the defaults (version 2 with link
# recovery) reject it: an offer without SEND_ID is one without link recovery (§6.4.14)
CONTEXT = {"frame-resource-offer": dict(version=2, recovery=False)}


def test_every_frame_vector_has_a_value():
    assert {n for n in V if n.startswith("frame-")} == set(FRAME_VALUES)


@pytest.mark.parametrize("name", sorted(FRAME_VALUES))
def test_frame_vectors(name):
    expected = FRAME_VALUES[name]
    ctx = CONTEXT.get(name, {})
    got = F.decode_frame(V[name], **ctx)
    assert (got.type, got.flags, got.channel, got.value) == \
           (expected.type, expected.flags, expected.channel, expected.value)
    assert F.encode_frame(expected) == V[name]
    # incremental parser, one byte at a time
    p = F.FrameParser(**ctx)
    out = []
    for b in V[name]:
        out += p.feed(bytes([b]))
    assert len(out) == 1 and out[0].value == expected.value


@pytest.mark.parametrize("name,role", [("resumption-proof-dialer", 0), ("resumption-proof-listener", 1)])
def test_resumption_proofs(name, role):
    key, binding = bytes(range(0xC0, 0xE0)), bytes(range(0x40, 0x60))
    assert resumption.proof(key, role, binding) == V[name]
    assert resumption.check(key, role, binding, V[name])
    assert not resumption.check(key, 1 - role, binding, V[name])      # the other role's proof


def test_datagram_sealed_hello():
    key = bytes(range(0xA0, 0xC0))
    assert D.seal(key, 0x01020304, 2, 5, b"hello") == V["datagram-sealed-hello"]
    assert D.open_sealed(key, V["datagram-sealed-hello"]) == b"hello"


def test_pairing_code_digest():
    args = (bytes(range(0x80, 0xA0)), ALICE.identifier, BOB.identifier, pairing.commitment(NONCE), NONCE,
            bytes(range(0x20, 0x40)))
    digest = hashlib.sha256(pairing.CODE_PREFIX + b"".join(args)).digest()[:8]
    assert digest == V["pairing-code-digest"]
    assert pairing.code(*args) == "585 420"


def test_every_vector_is_tested():
    tested = set(FRAME_VALUES) | {"preamble-optional-identity", "preamble-required-identity",
                                  "preamble-none-no-identity", "peer-id-alice", "connection-data-alice-for-bob",
                                  "datagram-header-sealed", "datagram-sealed-hello", "resumption-proof-dialer",
                                  "resumption-proof-listener", "pairing-code-digest"}
    assert set(V) <= tested, set(V) - tested


@pytest.mark.parametrize("name", ["frame-hello-resumption", "frame-resume", "frame-acknowledge",
                                  "frame-stream-resume", "frame-stream-ack", "frame-stream-ack-closed"])
def test_version_2_only_on_version_1(name):
    """§6.3, §6.4.1: RESUME, ACK, STREAM_RESUME, STREAM_ACK and HELLO purpose 4
    are violations on version 1."""
    F.decode_frame(V[name], version=2)
    with pytest.raises(ProtocolViolation):
        F.decode_frame(V[name], version=1)
    with pytest.raises(ProtocolViolation):
        F.decode_frame(V[name], version=1, recovery=False)
    with pytest.raises(ProtocolViolation):
        F.FrameParser(version=1).feed(V[name])


@pytest.mark.parametrize("name", ["frame-stream-resume", "frame-stream-ack", "frame-stream-ack-closed"])
def test_stream_resumption_frames_need_link_recovery(name):
    """§6.3, §7.10: STREAM_RESUME and STREAM_ACK on a connection without link
    recovery (plaintext version 2) are violations, from the header alone."""
    F.decode_frame(V[name], version=2, recovery=True)
    with pytest.raises(ProtocolViolation):
        F.decode_frame(V[name], version=2, recovery=False)
    with pytest.raises(ProtocolViolation):
        F.FrameParser(version=2, recovery=False).feed(V[name][:12])


OFFER_CONTEXTS = ((1, False), (1, True), (2, False), (2, True))   # (version, recovery)


@pytest.mark.parametrize("name", ["frame-resource-offer", "frame-resource-offer-send-id",
                                  "frame-resource-offer-resumed"])
def test_resource_offer_flags_follow_link_recovery(name):
    """§6.3, §6.4.14: with link recovery (version 2 and TLS) every
    RESOURCE_OFFER carries SEND_ID; without it (version 1, plaintext) SEND_ID
    and RESUMED are violations. All from the header alone."""
    raw = V[name]
    for version, recovery in OFFER_CONTEXTS:
        if (version >= 2 and recovery) == bool(raw[1] & F.FLAG_SEND_ID):
            fr = F.decode_frame(raw, version=version, recovery=recovery)
            assert (fr.value.send_id is not None) == bool(fr.flags & F.FLAG_SEND_ID)
            continue
        with pytest.raises(ProtocolViolation):
            F.decode_frame(raw, version=version, recovery=recovery)
        with pytest.raises(ProtocolViolation):
            F.FrameParser(version=version, recovery=recovery).feed(raw[:12])


def test_resumed_offer_needs_link_recovery():
    """§6.3: RESUMED without link recovery is a violation, with or without
    SEND_ID; RESUMED without SEND_ID with link recovery is one too."""
    offer = F.ResourceOffer(10, bytes(16), "x")
    bare = F.frame(F.RESOURCE_OFFER, offer.encode_payload(), 1, F.FLAG_RESUMED)
    for version, recovery in OFFER_CONTEXTS:
        with pytest.raises(ProtocolViolation):
            F.decode_frame(bare, version=version, recovery=recovery)
    raw = V["frame-resource-offer-resumed"]
    assert F.decode_frame(raw, version=2, recovery=True).flags == F.FLAG_RESUMED | F.FLAG_SEND_ID
    other = bytearray(raw)
    other[1] |= 0x04                     # any other flag stays reserved
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bytes(other))


def test_send_id_flag_and_field_agree():
    """§6.4.14: the payload ends with send_id exactly when SEND_ID is set."""
    with_id = V["frame-resource-offer-send-id"]
    without = V["frame-resource-offer"]
    # SEND_ID set, the field missing: the payload ends early
    short = bytearray(without)
    short[1] = F.FLAG_SEND_ID
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bytes(short), version=2, recovery=True)
    # the field without the flag: trailing bytes
    long = bytearray(with_id)
    long[1] = 0
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bytes(long), version=2, recovery=False)
    # encoding refuses a flag that disagrees with the value
    value = FRAME_VALUES["frame-resource-offer-send-id"].value
    with pytest.raises(ValueError):
        F.encode_frame(F.Frame(F.RESOURCE_OFFER, 0, 3, value))
    assert F.offer_frame(value, 3) == with_id
    assert F.offer_frame(value, 5, resumed=True) == V["frame-resource-offer-resumed"]
    assert F.offer_frame(FRAME_VALUES["frame-resource-offer"].value, 3) == without


@pytest.mark.parametrize("send_id", [None, 0x1122334455667788])
def test_resource_offer_length_bounds(send_id):
    """§6.3: 25-288 bytes: no name and no send ID is the least, a 255-byte
    name and a send ID the most; one byte beyond either is refused from the
    header."""
    recovery = send_id is not None
    for name in ("", "n" * 255):
        offer = F.ResourceOffer(1, bytes(16), name, send_id)
        raw = F.offer_frame(offer, 7)
        assert F.decode_frame(raw, version=2, recovery=recovery).value == offer
    assert len(F.offer_frame(F.ResourceOffer(1, bytes(16), "", None), 7)) == 12 + 25
    assert len(F.offer_frame(F.ResourceOffer(1, bytes(16), "n" * 255, 1), 7)) == 12 + 288
    flags = F.FLAG_SEND_ID if recovery else 0
    for length in (24, 289):
        with pytest.raises(ProtocolViolation):
            F.decode_header(F.encode_header(F.RESOURCE_OFFER, length, 7, flags), 2, recovery)


def test_stream_resume_names():
    """§6.4.13a: a name of 0 and 255 bytes (payload 5 and 260) are the bounds."""
    for name in ("", "x" * 255):
        raw = F.frame(F.STREAM_RESUME, F.StreamResume(7, name).encode_payload(), channel=5)
        assert F.decode_frame(raw).value == F.StreamResume(7, name)


@pytest.mark.parametrize("bad", [
    bytes.fromhex("250000000000000300000004" "00000002"),                     # STREAM_RESUME length 4
    bytes.fromhex("250000000000000300000005" "0000000201"),                   # string8 longer than payload
    bytes.fromhex("250000000000000300000006" "000000020061"),                 # trailing byte after the name
    bytes.fromhex("250100000000000300000005" "0000000200"),                   # STREAM_RESUME with a flag
    bytes.fromhex("250000000000000000000005" "0000000200"),                   # STREAM_RESUME on channel 0
    bytes.fromhex("250000000000000300000006" "0000000201ff"),                 # name not UTF-8
    bytes.fromhex("260200000000000100000008" + "00" * 8),                     # STREAM_ACK flag 0x02
    bytes.fromhex("260000000000000000000008" + "00" * 8),                     # STREAM_ACK on channel 0
    bytes.fromhex("260000000000000100000007" + "00" * 7),                     # STREAM_ACK length 7
    bytes.fromhex("260000000000000100000009" + "00" * 9),                     # STREAM_ACK length 9
])
def test_rejects_stream_resumption_frames(bad):
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bad, version=2)


@pytest.mark.parametrize("bad", [
    bytes.fromhex("0b00000000000000000000002" + "7" + "00" * 39),          # RESUME length 39
    bytes.fromhex("0b00000000000000000000002" + "9" + "00" * 41),          # RESUME length 41
    bytes.fromhex("0c000000000000000000000700" + "00" * 6),                # ACK length 7
    bytes.fromhex("0c010000000000000000000800" + "00" * 7),                # ACK with a flag
    bytes.fromhex("0c000000000000010000000800" + "00" * 7),                # ACK on a channel
])
def test_rejects_version_2(bad):
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bad, version=2)


def test_hello_purpose_5_rejected():
    raw = bytearray(V["frame-hello-resumption"])
    raw[13] = 5
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bytes(raw), version=2)


@pytest.mark.parametrize("bad", [
    bytes.fromhex("ff000000000000000000000000"),          # unknown type
    bytes.fromhex("10020000000000000000000000"),          # undefined flag on MESSAGE
    bytes.fromhex("02000001000000000000000101"),          # reserved non-zero
    bytes.fromhex("02000000000000010000000101"),          # TRUST on a channel
    bytes.fromhex("21000000000000000000000161"),          # STREAM_DATA on channel 0
    bytes.fromhex("02000000000000000000000104"),          # TRUST value 4
    bytes.fromhex("020000000000000000000002 0101".replace(" ", "")),  # TRUST length 2
    bytes.fromhex("24000000000000000000000400000000"),    # WINDOW_UPDATE 0
    bytes.fromhex("24000000000000000000000480000000"),    # WINDOW_UPDATE 2^31
])
def test_rejects(bad):
    with pytest.raises(ProtocolViolation):
        F.decode_frame(bad)


def test_huge_length_rejected_from_header():
    with pytest.raises(ProtocolViolation):
        F.decode_header(bytes.fromhex("10010000 00000000 ffffffff".replace(" ", "")))


def test_preamble_rejects():
    for bad in ["4d50435801010000", "4d50435000010000", "4d50435002010000",
                "4d50435001010300", "4d50435001010002"]:
        with pytest.raises(ProtocolViolation):
            Preamble.decode(bytes.fromhex(bad))


def test_negotiation_table():
    R, O, N = REQUIRED, OPTIONAL, NONE
    for ia in (False, True):
        for ib in (False, True):
            assert negotiate_encryption(N, ia, R, ib) == REFUSED
            assert negotiate_encryption(R, ia, N, ib) == REFUSED
            assert negotiate_encryption(R, ia, R, ib) == TLS
            assert negotiate_encryption(R, ia, O, ib) == TLS
            assert negotiate_encryption(O, ia, O, ib) == TLS
            for a, b in [(N, N), (N, O), (O, N)]:
                assert negotiate_encryption(a, ia, b, ib) == (TLS if (ia or ib) else PLAINTEXT)


def test_datagram_seal_roundtrip_and_tamper():
    key = bytes(range(32))
    raw = D.seal(key, 7, 0, 3, b"payload")
    assert D.open_sealed(key, raw) == b"payload"
    forged = bytearray(raw)
    forged[-1] ^= 1
    assert D.open_sealed(key, bytes(forged)) is None
    header_changed = bytearray(raw)
    header_changed[19] ^= 1            # counter is associated data
    assert D.open_sealed(key, bytes(header_changed)) is None


def test_replay_window():
    w = D.ReplayWindow(size=2048)
    for c in (0, 1, 5):
        assert w.check(c)
        w.commit(c)
    assert not w.check(1) and w.check(2)
    w.commit(5000)
    assert not w.check(2000) and w.check(4000) and not w.check(5000)
