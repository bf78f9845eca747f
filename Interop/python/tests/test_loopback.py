"""Python peer against itself over 127.0.0.1 (no library involved): every
negotiation outcome, pairing codes equal on both sides, messages, datagrams,
a stream and a resource."""
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp.session import Session   # noqa: E402

from peers import identity                          # noqa: E402


def connected(ev):
    return ev.kind == "state" and ev.data["state"] == "connected"


@pytest.mark.parametrize("pa,ia,pb,ib,outcome", [
    ("required", "alice", "required", None, "tls"),
    ("none", None, "none", None, "plaintext"),
    ("optional", None, "none", "carol", "tls"),
    ("optional", "bob", "optional", "alice", "tls"),
    ("none", None, "required", None, None),
])
def test_loopback(pa, ia, pb, ib, outcome):
    a, b = Session("a", pa, identity=identity(ia)), Session("b", pb, identity=identity(ib))
    try:
        conn = a.connect(b.make_connection_data(a.peer_id))
        ev = a.events.wait(lambda e: e.kind == "state" and e.data["state"] != "connecting", 5)
        if outcome is None:
            assert ev.data["state"] == "notConnected" and ev.data["reason"] == "encryptionIncompatible"
            return
        assert ev.data["state"] == "connected" and conn.outcome == outcome
        other = b.events.wait(connected, 5).data["conn"]
        assert conn.pairing_code == other.pairing_code
        big = os.urandom(3 << 20)
        conn.send_message(b"hi")
        conn.send_message(big)
        msgs = [b.events.wait(lambda e: e.kind == "message", 5)]
        msgs.append(b.events.wait(lambda e: e.kind == "message" and len(e.data["payload"]) > 2, 10))
        assert msgs[0].data["payload"] == b"hi" and msgs[1].data["payload"] == big
        a.send_datagram(conn, b"dg")
        assert b.events.wait(lambda e: e.kind == "datagram", 3).data["payload"] == b"dg"
        assert conn.send_stream("s", big, timeout=20)
        assert b.events.wait(lambda e: e.kind == "stream", 10).data["length"] == len(big)
        assert other.send_resource("r", big[:1 << 20], timeout=20) == ("received", None)
        assert a.events.wait(lambda e: e.kind == "resource", 10).data["length"] == 1 << 20
    finally:
        a.close()
        b.close()


def test_datagram_epochs():
    """§8: a sender with a small epoch length moves on every N datagrams, counters
    restarting at 0; the receiver follows (§8 rule 2): a later epoch that opens
    becomes current, even past lost epochs; two epochs back is dropped."""
    a, b = Session("a", "required", datagrams_per_epoch=3), Session("b", "required")
    try:
        conn = a.connect(b.make_connection_data(a.peer_id))
        assert a.events.wait(connected, 5) is not None
        assert b.events.wait(connected, 5) is not None
        mb = b.events.mark()
        for i in range(10):
            a.send_datagram(conn, b"d%d" % i)
            assert b.events.wait(lambda e: e.kind == "datagram" and e.data["payload"] == b"d%d" % i, 3,
                                 since=mb) is not None
        got = [(e.data["epoch"], e.data["counter"]) for e in b.events.all(lambda e: e.kind == "datagram", since=mb)]
        assert got == [divmod(i, 3) for i in range(10)]
        assert conn.send_epoch == 3
        m = b.events.mark()
        a.udp_send_raw(conn, a.seal_datagram(conn, b"skip", epoch=5, counter=0))
        assert b.events.wait(lambda e: e.kind == "datagram", 3, since=m).data["payload"] == b"skip"
        a.udp_send_raw(conn, a.seal_datagram(conn, b"old", epoch=3, counter=5))
        assert b.events.wait(lambda e: e.kind == "datagram-dropped", 3, since=m).data["why"] == "epoch"
        a.udp_send_raw(conn, a.seal_datagram(conn, b"prev", epoch=4, counter=0))
        assert b.events.wait(lambda e: e.kind == "datagram" and e.data["payload"] == b"prev", 3,
                             since=m) is not None
    finally:
        a.close()
        b.close()
