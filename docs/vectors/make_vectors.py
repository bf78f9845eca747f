#!/usr/bin/env python3
"""Writes the test vectors of docs/PROTOCOL.md §11 from the spec's tables alone.

An encoder independent of the Swift code: the Swift tests decode these bytes and
encode their own values back to them, so the two implementations must agree.
Run: python3 docs/vectors/make_vectors.py   (rewrites the block in PROTOCOL.md; the sealed
datagram needs PyNaCl: pip install PyNaCl)
"""
import hashlib
import hmac
import pathlib
import struct

ALICE_ID = bytes(range(16))
BOB_ID = bytes(range(0xF0, 0x100))


def peer_id(identifier, name):
    raw = name.encode()
    return b"\x01" + identifier + bytes([len(raw)]) + raw


def preamble(pref, identity, lo=1, hi=1):
    return b"MPCP" + bytes([lo, hi, pref, 1 if identity else 0])


def frame(ftype, payload, channel=0, flags=0):
    return struct.pack(">BBHII", ftype, flags, 0, channel, len(payload)) + payload


def endpoint_v4(a, b, c, d, port):
    return bytes([4, a, b, c, d]) + struct.pack(">H", port)


def endpoint_v6_loopback(port):
    return bytes([6]) + bytes(15) + b"\x01" + struct.pack(">H", port)


DIALER = preamble(0, True)   # optional, identity
LISTENER = preamble(1, True)  # required, identity
TOKEN = bytes(range(0x10, 0x20))


def alice_for_bob():
    return (b"MPCD" + bytes([1, 1, 1, 0]) + TOKEN + BOB_ID + peer_id(ALICE_ID, "alice")
            + bytes([32]) + hashlib.sha256(b"alice").digest()
            + bytes([2]) + endpoint_v4(127, 0, 0, 1, 50001) + endpoint_v6_loopback(50001))


def hello(purpose, token, listen, dport, rid, pid, version=1):
    return (bytes([version, purpose]) + b"\x00\x00" + DIALER + LISTENER + token
            + struct.pack(">HHI", listen, dport, rid) + pid)


ALICE_FOR_BOB = alice_for_bob()

# §7.3: the dialer's nonce is the one of frame-pairing-nonce, so its commitment is the one of
# frame-pairing-commit.
PAIRING_EXPORTER = bytes(range(0x80, 0xA0))
PAIRING_DIALER_NONCE = bytes(range(32))
PAIRING_LISTENER_NONCE = bytes(range(0x20, 0x40))


def pairing_digest():
    commitment = hashlib.sha256(b"mpcp pairing commit v1" + PAIRING_DIALER_NONCE).digest()
    return hashlib.sha256(b"mpcp pairing code v1" + PAIRING_EXPORTER + ALICE_ID + BOB_ID + commitment
                          + PAIRING_DIALER_NONCE + PAIRING_LISTENER_NONCE).digest()[:8]


def pairing_code():
    digits = f"{int.from_bytes(pairing_digest(), 'big') % 1_000_000:06d}"
    return digits[:3] + " " + digits[3:]


# §7.9: the old session's resumption key and the new connection's binding export.
RESUMPTION_KEY = bytes(range(0xC0, 0xE0))
RESUMPTION_BINDING = bytes(range(0x40, 0x60))
RESUMPTION_ID = bytes(range(0x60, 0x70))


def resumption_proof(role):
    return hmac.new(RESUMPTION_KEY, b"MPCP resume v2" + bytes([role]) + RESUMPTION_BINDING, hashlib.sha256).digest()


DATAGRAM_KEY = bytes(range(0xA0, 0xC0))
DATAGRAM_HEADER = struct.pack(">B3xIIQ", 1, 0x01020304, 2, 5)


def sealed_datagram():
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt
    nonce = bytes(12) + struct.pack(">IQ", 2, 5)
    return DATAGRAM_HEADER + crypto_aead_xchacha20poly1305_ietf_encrypt(b"hello", DATAGRAM_HEADER, nonce, DATAGRAM_KEY)


VECTORS = [
    ("preamble-optional-identity", "Preamble: versions 1-1, optional, hasIdentity.", DIALER),
    ("preamble-required-identity", "Preamble: versions 1-1, required, hasIdentity.", LISTENER),
    ("preamble-none-no-identity", "Preamble: versions 1-1, none, no identity.", preamble(2, False)),
    ("peer-id-alice", "Peer ID: identifier 00..0f, display name \"alice\".", peer_id(ALICE_ID, "alice")),
    ("frame-hello-connection-data",
     "HELLO from alice (dialer): purpose 1, echo of the two preambles above, token 10..1f, "
     "listenPort 50001, datagramPort 50002, receiver ID 0x01020304.",
     frame(0x01, hello(1, TOKEN, 50001, 50002, 0x01020304, peer_id(ALICE_ID, "alice")))),
    ("frame-hello-answer",
     "HELLO from bob (listener): purpose 0, same echo, zero token, listenPort 50003, no datagrams.",
     frame(0x01, hello(0, bytes(16), 50003, 0, 0, peer_id(BOB_ID, "bob")))),
    ("frame-trust-accepted", "TRUST accepted.", frame(0x02, b"\x01")),
    ("frame-invitation", "INVITATION: timeout 30,000 ms, context \"game=1\".",
     frame(0x03, struct.pack(">IH", 30000, 6) + b"game=1")),
    ("frame-invitation-response-declined", "INVITATION_RESPONSE declined.", frame(0x04, b"\x02")),
    ("frame-invitation-response-accepted",
     "INVITATION_RESPONSE accepted, with connection data made by alice for bob (the connection-data-alice-for-bob vector).",
     frame(0x04, b"\x01" + struct.pack(">H", len(ALICE_FOR_BOB)) + ALICE_FOR_BOB)),
    ("frame-mesh-introduction",
     "MESH_INTRODUCTION: bob at 127.0.0.1:50003, alice at [::1]:50001.",
     frame(0x05, b"\x02" + peer_id(BOB_ID, "bob") + endpoint_v4(127, 0, 0, 1, 50003)
           + peer_id(ALICE_ID, "alice") + endpoint_v6_loopback(50001))),
    ("frame-goodbye-duplicate-connection", "GOODBYE reason 7 (duplicateConnection).", frame(0x06, b"\x00\x07")),
    ("frame-pairing-commit", "PAIRING_COMMIT: the commitment to the nonce 00 01 … 1f, SHA-256(\"mpcp pairing commit v1\" || nonce).",
     frame(0x09, hashlib.sha256(b"mpcp pairing commit v1" + bytes(range(32))).digest())),
    ("frame-pairing-nonce", "PAIRING_NONCE: the nonce 00 01 … 1f.", frame(0x0A, bytes(range(32)))),
    ("frame-hello-resumption",
     "HELLO from alice (dialer), version 2, purpose 4 (resumption), the same echo, the resumption ID 60..6f as token, "
     "listenPort 50001, datagramPort 50002, receiver ID 0x01020304.",
     frame(0x01, hello(4, RESUMPTION_ID, 50001, 50002, 0x01020304, peer_id(ALICE_ID, "alice"), version=2))),
    ("frame-resume",
     "RESUME (version 2): the dialer's proof of the resumption-proof-dialer vector, delivered 0x0102030405060708.",
     frame(0x0B, resumption_proof(0) + bytes(range(1, 9)))),
    ("frame-acknowledge", "ACK (version 2): delivered 0x0102030405060708.", frame(0x0C, bytes(range(1, 9)))),
    ("frame-ping", "PING 0x0102030405060708.", frame(0x07, bytes(range(1, 9)))),
    ("frame-pong", "PONG 0x0102030405060708.", frame(0x08, bytes(range(1, 9)))),
    ("frame-message-end", "MESSAGE \"hello\" with END: a whole one-fragment message.",
     frame(0x10, b"hello", flags=1)),
    ("frame-message-fragment", "MESSAGE fragment \"hel\" without END.", frame(0x10, b"hel")),
    ("frame-message-empty", "MESSAGE: the empty message (no payload, END).", frame(0x10, b"", flags=1)),
    ("frame-stream-open", "STREAM_OPEN channel 1, name \"chat\".", frame(0x20, b"\x04chat", channel=1)),
    ("frame-stream-resume", "STREAM_RESUME (version 2) channel 3, ordinal 2, name \"chat\".",
     frame(0x25, struct.pack(">I", 2) + b"\x04chat", channel=3)),
    ("frame-stream-ack", "STREAM_ACK (version 2) channel 1, received 262,144.",
     frame(0x26, struct.pack(">Q", 262144), channel=1)),
    ("frame-stream-ack-closed", "STREAM_ACK (version 2) with CLOSED, channel 1, received 3.",
     frame(0x26, struct.pack(">Q", 3), channel=1, flags=0x01)),
    ("frame-stream-data", "STREAM_DATA channel 1, \"abc\".", frame(0x21, b"abc", channel=1)),
    ("frame-stream-close", "STREAM_CLOSE channel 1.", frame(0x22, b"", channel=1)),
    ("frame-stream-reset", "STREAM_RESET channel 2, code 1 (cancelled).", frame(0x23, b"\x00\x01", channel=2)),
    ("frame-window-update", "WINDOW_UPDATE on the connection (channel 0), increment 65,536.",
     frame(0x24, struct.pack(">I", 65536))),
    ("frame-resource-offer", "RESOURCE_OFFER channel 3, size 1,048,576, transfer ID 00 01 02 … 0f, name \"photo.jpg\" (on a connection without link recovery: version 1, or plaintext).",
     frame(0x30, struct.pack(">Q", 1 << 20) + bytes(range(16)) + b"\x09photo.jpg", channel=3)),
    ("frame-resource-offer-send-id",
     "RESOURCE_OFFER (version 2) with SEND_ID: the same offer on a connection with link recovery, send ID 0x1122334455667788.",
     frame(0x30, struct.pack(">Q", 1 << 20) + bytes(range(16)) + b"\x09photo.jpg" + struct.pack(">Q", 0x1122334455667788),
           channel=3, flags=0x02)),
    ("frame-resource-offer-resumed",
     "RESOURCE_OFFER (version 2) with RESUMED and SEND_ID: the same send offered again on a resumed connection, channel 5.",
     frame(0x30, struct.pack(">Q", 1 << 20) + bytes(range(16)) + b"\x09photo.jpg" + struct.pack(">Q", 0x1122334455667788),
           channel=5, flags=0x03)),
    ("frame-resource-chunk", "RESOURCE_CHUNK channel 3, bytes 00 ff.", frame(0x31, b"\x00\xff", channel=3)),
    ("frame-resource-complete", "RESOURCE_COMPLETE channel 3, SHA-256 of the empty string.",
     frame(0x32, hashlib.sha256(b"").digest(), channel=3)),
    ("frame-resource-cancel", "RESOURCE_CANCEL channel 3, reason 1 (cancelled).", frame(0x33, b"\x00\x01", channel=3)),
    ("frame-resource-accept", "RESOURCE_ACCEPT channel 3, offset 262,144 (a resumed transfer).",
     frame(0x34, struct.pack(">Q", 262144), channel=3)),
    ("frame-resource-received", "RESOURCE_RECEIVED channel 3.", frame(0x35, b"", channel=3)),
    ("connection-data-alice-for-bob",
     "Connection data made by alice for bob: required, identity with fingerprint SHA-256(\"alice\"), "
     "token 10..1f, endpoints 127.0.0.1:50001 and [::1]:50001.",
     ALICE_FOR_BOB),
    ("datagram-header-sealed", "Datagram header: sealed, receiver ID 0x01020304, epoch 2, counter 5.",
     DATAGRAM_HEADER),
    ("datagram-sealed-hello",
     "A whole sealed datagram: that header, the message \"hello\", sealed with key a0..bf "
     "(XChaCha20-Poly1305-IETF, nonce 00 x 12 then epoch and counter, the header as associated data).",
     sealed_datagram()),
    ("resumption-proof-dialer",
     "The dialer's resumption proof (§7.9): HMAC-SHA256 with the key c0..df over \"MPCP resume v2\", the role 0 "
     "and the binding 40..5f.",
     resumption_proof(0)),
    ("resumption-proof-listener", "The same for the listener (role 1).", resumption_proof(1)),
    ("pairing-code-digest",
     "The first 8 bytes of the pairing code's SHA-256 (§7.3) for dialer alice (00..0f) and listener bob (f0..ff), "
     "exporter value 80..9f, dialer nonce 00..1f (commitment as in frame-pairing-commit), listener nonce 20..3f; "
     f"as a big-endian integer modulo 1,000,000 it is the code {pairing_code()}.",
     pairing_digest()),
]


def render():
    out = []
    for name, text, data in VECTORS:
        lines = [" ".join(f"{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
        out.append(f"### {name}\n\n{text} ({len(data)} bytes)\n\n```hex\n" + "\n".join(lines) + "\n```\n")
    return "\n".join(out)


def main():
    spec = pathlib.Path(__file__).resolve().parent.parent / "PROTOCOL.md"
    text = spec.read_text()
    begin, end = "<!-- vectors:begin -->\n", "<!-- vectors:end -->"
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    spec.write_text(head + begin + "\n" + render() + "\n" + end + tail)


if __name__ == "__main__":
    main()
