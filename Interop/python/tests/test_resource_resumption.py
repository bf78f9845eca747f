"""§7.9 resources across a lost link, Python to Python on 127.0.0.1: a
RESOURCE_RECEIVED lost with the link (the resource arrives once, the
sender's transfer succeeds after the resumption, offered again with
RESUMED), the same file sent anew after a loss (a second delivery), the flag
without link recovery (protocolError), and the cap on remembered verdicts
under a flood. Every wait is bounded."""
import os
import pathlib
import sys
import threading

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp import frames as F                        # noqa: E402
from mpcp.resources import VERDICTS_KEPT            # noqa: E402
from mpcp.session import Session                    # noqa: E402

from peers import loopback_sessions, pair           # noqa: E402


@pytest.fixture
def sessions():
    with loopback_sessions() as make:
        yield make


def deliveries(s, name, since=0):
    return s.events.all(lambda e: e.kind == "resource" and e.data["name"] == name, since=since)


def not_connected(s, since):
    return s.events.all(lambda e: e.kind == "state" and e.data["state"] == "notConnected", since=since)


def test_received_lost_with_the_link_arrives_once(sessions):
    a, b = sessions("a"), sessions("b")
    pair(a, b)
    data = os.urandom(300_000)
    ma, mb = a.events.mark(), b.events.mark()
    a.hooks["cut_on_resource_received"] = True
    res = a.send_resource(b.peer_id, "once.bin", data, timeout=20)
    assert res == ("received", None)
    assert "cut_on_resource_received" not in a.hooks, "the sender never read RESOURCE_RECEIVED"
    assert a.events.all(lambda e: e.kind == "resumed", since=ma)
    again = a.events.all(lambda e: e.kind == "resource-offered-again", since=ma)
    assert len(again) == 1
    answered = b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)
    assert len(answered) == 1 and answered[0].data["verdict"] == ("received", None)
    # the receiver answers the second COMPLETE before the sender returns: nothing is still to come
    assert len(deliveries(b, "once.bin", mb)) == 1
    assert not not_connected(a, ma) and not not_connected(b, mb)


def test_resource_received_withheld_at_the_cut_arrives_once(sessions):
    """The receiver's side of the same loss: it resets the link instead of
    sending RESOURCE_RECEIVED; the sender offers again with RESUMED."""
    a, b = sessions("a"), sessions("b")
    pair(a, b)
    data = os.urandom(200_000)
    ma, mb = a.events.mark(), b.events.mark()
    b.hooks["cut_instead_of_resource_received"] = True
    assert a.send_resource(b.peer_id, "withheld.bin", data, timeout=20) == ("received", None)
    assert "cut_instead_of_resource_received" not in b.hooks
    assert len(a.events.all(lambda e: e.kind == "resource-offered-again", since=ma)) == 1
    assert len(deliveries(b, "withheld.bin", mb)) == 1


def test_same_file_sent_anew_after_a_loss_arrives_again(sessions):
    a, b = sessions("a"), sessions("b")
    conn, _ = pair(a, b)
    data = os.urandom(100_000)
    ma, mb = a.events.mark(), b.events.mark()
    assert a.send_resource(b.peer_id, "anew.bin", data, timeout=10) == ("received", None)
    conn.reset()
    assert a.events.wait(lambda e: e.kind == "resumed", 10, since=ma) is not None
    # the same content, so the same transfer ID and size, but a new transfer: no RESUMED
    assert a.send_resource(b.peer_id, "anew.bin", data, timeout=10) == ("received", None)
    assert len(deliveries(b, "anew.bin", mb)) == 2
    offers = b.events.all(lambda e: e.kind == "resource-started" and e.data["name"] == "anew.bin", since=mb)
    assert [o.data["resumed"] for o in offers] == [False, False]
    assert not b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)
    assert not a.events.all(lambda e: e.kind == "resource-offered-again", since=ma)


@pytest.mark.parametrize("kind", ["plaintext", "version 1"])
def test_resumed_flag_without_link_recovery_is_a_protocol_error(sessions, kind):
    if kind == "plaintext":
        a, b = sessions("a", "none"), sessions("b", "none")
    else:
        a, b = sessions("a", max_version=1), sessions("b", max_version=1)
    conn, theirs = pair(a, b)
    assert theirs.link_recovery is False
    ma = a.events.mark()
    offer = F.ResourceOffer(10, bytes(16), "x")
    conn.send_raw(F.frame(F.RESOURCE_OFFER, offer.encode_payload(), conn.next_channel, F.FLAG_RESUMED))
    bye = a.events.wait(lambda e: e.kind == "goodbye", 5, since=ma)
    assert bye is not None and bye.data["reason"] == 1
    assert theirs.end_reason.startswith("protocolError")


def test_remembered_verdicts_are_the_latest_under_a_flood(sessions):
    assert VERDICTS_KEPT == 64 and Session("c", listen=False, datagrams=False).verdicts_kept == 64
    a, b = sessions("a"), sessions("b")
    b.verdicts_kept = 4
    conn, _ = pair(a, b)
    mb = b.events.mark()
    contents = [os.urandom(1000 + i) for i in range(40)]
    results = [None] * len(contents)

    def send(i):
        results[i] = a.send_resource(b.peer_id, "flood %d" % i, contents[i], timeout=20)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(contents))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [("received", None)] * len(contents)
    m = b.member(a.peer_id)
    assert m.verdicts.limit == 4 and len(m.verdicts) == 4
    order = [int(e.data["name"].split()[1]) for e in b.events.all(lambda e: e.kind == "resource", since=mb)]
    assert sorted(order) == list(range(len(contents)))
    latest, forgotten = order[-1], order[-5]
    # a RESUMED offer of one still remembered: answered again, not delivered again
    mb = b.events.mark()
    data = contents[latest]
    tid = a_transfer_id(b, data)
    assert conn.send_resource("flood %d" % latest, data, tid, 10, resumed=True) == ("received", None)
    assert not deliveries(b, "flood %d" % latest, mb)
    # ... and of one pushed out by later verdicts: a new transfer, delivered again
    data = contents[forgotten]
    assert conn.send_resource("flood %d" % forgotten, data, a_transfer_id(b, data), 10,
                              resumed=True) == ("received", None)
    assert len(deliveries(b, "flood %d" % forgotten, mb)) == 1
    assert len(m.verdicts) == 4


def a_transfer_id(receiver, data):
    from mpcp.resources import transfer_id
    return transfer_id(receiver.peer_id.identifier, data)
