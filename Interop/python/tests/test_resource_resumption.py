"""§7.9 resources across a lost link, Python to Python on 127.0.0.1: a
RESOURCE_RECEIVED lost with the link (the resource arrives once, the
sender's transfer succeeds after the resumption, offered again with
RESUMED), the same file sent anew after a loss (a second delivery), an offer
that went unanswered offered again without RESUMED and one accepted earlier
always with it, a transfer interrupted after its RESOURCE_ACCEPT taken up
rather than answered with an earlier transfer's verdict, everything matched
by send ID and content together (a receiver's lost cancel of a second send,
two sends' verdicts, a waiting transfer and another send of its content),
RESUMED and SEND_ID against link recovery (protocolError), and the cap on
remembered verdicts under a flood. Every wait is bounded."""
import hashlib
import os
import pathlib
import sys
import threading
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp import frames as F                        # noqa: E402
from mpcp.resources import VERDICTS_KEPT, VerdictBook, offer_key  # noqa: E402
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
    resumptions = len(a.events.all(lambda e: e.kind == "resumed", since=ma))
    assert resumptions
    # once per resumption until answered: both sides redial, and a crossing (GOODBYE 7 both
    # ways, a loss resumed again; SPEC-GAPS 40) can take a RESUMED offer before its answer
    again = a.events.all(lambda e: e.kind == "resource-offered-again", since=ma)
    assert 1 <= len(again) <= resumptions, (len(again), resumptions)
    answered = b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)
    assert 1 <= len(answered) <= len(again) and all(e.data["verdict"] == ("received", None) for e in answered)
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
    # once per resumption until answered (a crossing can resume again; SPEC-GAPS 40)
    again = len(a.events.all(lambda e: e.kind == "resource-offered-again", since=ma))
    assert 1 <= again <= len(a.events.all(lambda e: e.kind == "resumed", since=ma)), again
    assert len(deliveries(b, "withheld.bin", mb)) == 1


def offers_again(s, name, since):
    """The sender's offers of a transfer made again, in order: [resumed, ...]."""
    return [e.data["resumed"] for e in s.events.all(
        lambda e: e.kind == "resource-offered-again" and e.data["name"] == name, since=since)]


def named(s, kinds, name, since):
    """Events of these kinds about the resource `name`, in order."""
    return s.events.all(lambda e: e.kind in kinds and e.data["name"] == name, since=since)


def check_resumed_only_after_accept(s, name, since):
    """§7.9 on the sender's log: each offer made again carries RESUMED if,
    and only if, a RESOURCE_ACCEPT of the transfer was read before it."""
    read = False
    for e in named(s, ("resource-accepted", "resource-offered-again"), name, since):
        if e.kind == "resource-accepted":
            read = True
        else:
            assert e.data["resumed"] == read, "offered again %s RESUMED, RESOURCE_ACCEPT %s" % (
                "with" if e.data["resumed"] else "without", "read" if read else "never read")


def check_answered_only_after_delivery(s, name, since):
    """The receiver answers a RESUMED offer from memory only with the verdict
    of a transfer since `since` (one it delivered there), never an earlier's."""
    delivered = False
    for e in named(s, ("resource", "resource-answered-again"), name, since):
        if e.kind == "resource":
            delivered = True
        else:
            assert delivered, "answered from memory before delivering this transfer: an earlier one's verdict"


def test_same_file_sent_anew_after_a_loss_arrives_again(sessions):
    """After a loss and the resumption, the same content (so the same transfer
    ID and size) sent again is a new transfer: no RESUMED, delivered again.
    Both sides redial, and crossing resumption dials (SPEC-GAPS 40) can close
    the connection the second send's offer went on (GOODBYE 7) and resume
    again; the offer is then made again, without RESUMED as long as b's
    RESOURCE_ACCEPT of it was never read (§7.9), so b never answers it with
    the first transfer's verdict."""
    a, b = sessions("a"), sessions("b")
    conn, _ = pair(a, b)
    data = os.urandom(100_000)
    mb = b.events.mark()
    assert a.send_resource(b.peer_id, "anew.bin", data, timeout=10) == ("received", None)
    ma = a.events.mark()
    conn.reset()
    assert a.events.wait(lambda e: e.kind == "resumed", 10, since=ma) is not None
    ma, mb2 = a.events.mark(), b.events.mark()
    assert a.send_resource(b.peer_id, "anew.bin", data, timeout=10) == ("received", None)
    assert len(deliveries(b, "anew.bin", mb)) == 2
    assert len(deliveries(b, "anew.bin", mb2)) == 1
    check_resumed_only_after_accept(a, "anew.bin", ma)
    check_answered_only_after_delivery(b, "anew.bin", mb2)
    offers = b.events.all(lambda e: e.kind == "resource-started" and e.data["name"] == "anew.bin", since=mb2)
    answered = b.events.all(lambda e: e.kind == "resource-answered-again", since=mb2)
    assert offers and offers[0].data["resumed"] is False
    if not any(offers_again(a, "anew.bin", ma)):
        # the usual case, a crossing that took the offer before its RESOURCE_ACCEPT
        # was read included: no offer b read for the second send carried RESUMED,
        # and b answered none from memory
        assert not any(o.data["resumed"] for o in offers)
        assert not answered
    else:
        # rarely, the crossing took the link after a read the RESOURCE_ACCEPT: then
        # RESUMED is right, and b took up its interrupted transfer (delivered above)
        # or answered with the second transfer's verdict (checked above)
        assert len([o for o in offers if o.data["resumed"]]) + len(answered) <= sum(offers_again(a, "anew.bin", ma))


def test_unanswered_offer_of_a_resend_is_offered_again_without_resumed(sessions):
    """§7.9: the offer of a resend goes with the link before the receiver
    answers it (b resets TCP on reading it), while b remembers its verdict on
    the same content from the first send. The sender read no RESOURCE_ACCEPT,
    so its next offer carries no RESUMED, and the file arrives a second time
    (with RESUMED, b would answer it with the first send's verdict)."""
    a, b = sessions("a"), sessions("b")
    pair(a, b)
    data = os.urandom(100_000)
    assert a.send_resource(b.peer_id, "resend.bin", data, timeout=10) == ("received", None)
    first = deliveries(b, "resend.bin")[0].data["send_id"]
    assert b.member(a.peer_id).verdicts.get(offer_key(first, a_transfer_id(b, data), len(data))) == \
        ("received", None)
    ma, mb = a.events.mark(), b.events.mark()
    b.hooks["cut_on_resource_offer"] = True
    assert a.send_resource(b.peer_id, "resend.bin", data, timeout=20) == ("received", None)
    assert "cut_on_resource_offer" not in b.hooks, "b never read the offer"
    again = offers_again(a, "resend.bin", ma)
    assert again and again[0] is False, "offered again %s" % again
    check_resumed_only_after_accept(a, "resend.bin", ma)
    assert len(deliveries(b, "resend.bin", mb)) == 1
    check_answered_only_after_delivery(b, "resend.bin", mb)
    offers = b.events.all(lambda e: e.kind == "resource-started" and e.data["name"] == "resend.bin", since=mb)
    assert offers and offers[0].data["resumed"] is False
    assert not not_connected(a, ma) and not not_connected(b, mb)


def test_resumed_stays_on_every_offer_once_accepted(sessions):
    """§7.9: a transfer accepted on an earlier connection keeps RESUMED on
    every later offer, even after one that went unanswered: a loses
    RESOURCE_RECEIVED with the link, then b resets TCP on reading the RESUMED
    offer; the next offer still carries RESUMED and is answered from memory,
    the file delivered once (without RESUMED it would arrive a second time)."""
    a, b = sessions("a"), sessions("b")
    pair(a, b)
    data = os.urandom(100_000)
    ma, mb = a.events.mark(), b.events.mark()
    a.hooks["cut_on_resource_received"] = True
    b.hooks["cut_on_resource_offer"] = lambda fr: bool(fr.flags & F.FLAG_RESUMED)
    assert a.send_resource(b.peer_id, "sticky.bin", data, timeout=20) == ("received", None)
    assert "cut_on_resource_received" not in a.hooks and "cut_on_resource_offer" not in b.hooks
    again = offers_again(a, "sticky.bin", ma)
    assert len(again) >= 2 and all(again), "offered again %s" % again
    check_resumed_only_after_accept(a, "sticky.bin", ma)
    assert len(deliveries(b, "sticky.bin", mb)) == 1
    offers = b.events.all(lambda e: e.kind == "resource-started" and e.data["name"] == "sticky.bin", since=mb)
    assert [o.data["resumed"] for o in offers] == [False]
    assert b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)
    assert not not_connected(a, ma) and not not_connected(b, mb)


def test_transfer_interrupted_after_accept_is_taken_up_not_answered_from_memory(sessions):
    """§7.9, the receiver's side: b remembers its verdict on the first send
    of some content; the second send of it is accepted (a reads the
    RESOURCE_ACCEPT) and the link goes at its first chunk. a offers it again
    with RESUMED and the second send's ID; b takes up the transfer of that
    send that waits (the remembered verdict is another send's and never
    answers it) from 0 (it keeps no partial) and delivers the file a second
    time."""
    a, b = sessions("a"), sessions("b")
    pair(a, b)
    data = os.urandom(300_000)
    assert a.send_resource(b.peer_id, "taken up.bin", data, timeout=10) == ("received", None)
    ma, mb = a.events.mark(), b.events.mark()
    b.hooks["cut_on_resource_chunk"] = True
    assert a.send_resource(b.peer_id, "taken up.bin", data, timeout=20) == ("received", None)
    assert "cut_on_resource_chunk" not in b.hooks
    again = offers_again(a, "taken up.bin", ma)
    assert again and all(again), "offered again %s" % again
    check_resumed_only_after_accept(a, "taken up.bin", ma)
    assert len(deliveries(b, "taken up.bin", mb)) == 1
    check_answered_only_after_delivery(b, "taken up.bin", mb)
    offers = b.events.all(lambda e: e.kind == "resource-started" and e.data["name"] == "taken up.bin", since=mb)
    assert [(o.data["resumed"], o.data["waited"]) for o in offers][:1] == [(False, False)]
    assert (True, True) in [(o.data["resumed"], o.data["waited"]) for o in offers]
    assert not not_connected(a, ma) and not not_connected(b, mb)


@pytest.mark.parametrize("kind,send_id,resumed", [
    # without link recovery: RESUMED or SEND_ID (§6.3, §6.4.14)
    ("plaintext", None, True), ("plaintext", 7, False), ("plaintext", 7, True),
    ("version 1", None, True), ("version 1", 7, False), ("version 1", 7, True),
    # with it: any offer without SEND_ID (§6.4.14)
    ("link recovery", None, False), ("link recovery", None, True),
])
def test_offer_flags_against_link_recovery_are_a_protocol_error(sessions, kind, send_id, resumed):
    """§10: an offer without SEND_ID on a connection with link recovery, or
    with SEND_ID (or RESUMED) on one without, ends it with GOODBYE 1."""
    if kind == "plaintext":
        a, b = sessions("a", "none"), sessions("b", "none")
    elif kind == "version 1":
        a, b = sessions("a", max_version=1), sessions("b", max_version=1)
    else:
        a, b = sessions("a"), sessions("b")
    conn, theirs = pair(a, b)
    assert theirs.link_recovery is (kind == "link recovery")
    ma, mb = a.events.mark(), b.events.mark()
    offer = F.ResourceOffer(10, bytes(16), "x", send_id)
    conn.send_raw(F.offer_frame(offer, conn.next_channel, resumed))
    bye = a.events.wait(lambda e: e.kind == "goodbye", 5, since=ma)
    assert bye is not None and bye.data["reason"] == 1
    assert theirs.end_reason.startswith("protocolError")
    assert not b.events.all(lambda e: e.kind.startswith("resource"), since=mb)


def test_offers_carry_send_id_exactly_with_link_recovery(sessions):
    """§6.4.14 on the sender: a connection with link recovery puts a send ID
    on every offer (a new one per send unless given), one without never."""
    a, b = sessions("a"), sessions("b")
    conn, _ = pair(a, b)
    assert conn.resource_offer(1, bytes(16), "x", 5).send_id == 5
    ids = {conn.resource_offer(1, bytes(16), "x").send_id for _ in range(8)}
    assert None not in ids and len(ids) == 8
    c, d = sessions("a", "none"), sessions("b", "none")
    plain, _ = pair(c, d)
    assert plain.resource_offer(1, bytes(16), "x", 5).send_id is None
    md = d.events.mark()
    assert c.send_resource(d.peer_id, "plain.bin", b"abc", timeout=10) == ("received", None)
    assert deliveries(d, "plain.bin", md)[0].data["send_id"] is None


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
    delivered = b.events.all(lambda e: e.kind == "resource", since=mb)
    order = [int(e.data["name"].split()[1]) for e in delivered]
    send_ids = {int(e.data["name"].split()[1]): e.data["send_id"] for e in delivered}
    assert sorted(order) == list(range(len(contents)))
    latest, forgotten = order[-1], order[-5]
    # a RESUMED offer of one still remembered: answered again, not delivered again
    mb = b.events.mark()
    data = contents[latest]
    tid = a_transfer_id(b, data)
    assert conn.send_resource("flood %d" % latest, data, tid, 10, resumed=True,
                              send_id=send_ids[latest]) == ("received", None)
    assert not deliveries(b, "flood %d" % latest, mb)
    # ... but not one of another send of that content: a new transfer
    assert conn.send_resource("flood %d" % latest, data, tid, 10, resumed=True,
                              send_id=send_ids[latest] ^ 1) == ("received", None)
    assert len(deliveries(b, "flood %d" % latest, mb)) == 1
    # ... and of one pushed out by later verdicts: a new transfer, delivered again
    data = contents[forgotten]
    assert conn.send_resource("flood %d" % forgotten, data, a_transfer_id(b, data), 10,
                              resumed=True, send_id=send_ids[forgotten]) == ("received", None)
    assert len(deliveries(b, "flood %d" % forgotten, mb)) == 1
    assert len(m.verdicts) == 4


def a_transfer_id(receiver, data):
    from mpcp.resources import transfer_id
    return transfer_id(receiver.peer_id.identifier, data)


def carrying(a, b, timeout=10):
    """a's live connection carrying member b (waiting for a resumption)."""
    conn = a._carrying(a.member(b.peer_id), time.monotonic() + timeout)
    assert conn is not None, "no connection carries b"
    return conn


def offer_on_carrying(a, b, name, data, tid, timeout, resumed=False, tries=4, **kw):
    """Connection.offer_resource on a's connection carrying b, made again on
    the next one if a crossing resumption (SPEC-GAPS 40) takes the link
    first, with RESUMED from then on if the RESOURCE_ACCEPT was read (§7.9),
    as Session.send_resource does."""
    for _ in range(tries):
        conn = carrying(a, b)
        res, accepted = conn.offer_resource(name, data, tid, timeout, resumed, **kw)
        if res[0] != "failed" or not conn.closed.is_set():
            return res
        resumed = resumed or accepted
    return res


def cut_and_resume(a, b, conn):
    ma = a.events.mark()
    conn.reset()
    assert a.events.wait(lambda e: e.kind == "resumed", 10, since=ma) is not None


def test_lost_cancel_of_a_second_send_is_a_new_transfer(sessions):
    """§7.9: b remembers RESOURCE_RECEIVED for a first send of some content.
    a sends the same content again (same transfer ID) on the live link; b
    accepts it, then b's application cancels it, and its RESOURCE_CANCEL 1
    goes with the link. a read the RESOURCE_ACCEPT, so it offers the send
    again with RESUMED and its send ID on the resumed connection. The verdict
    b remembers is the first send's and must not answer it (by content alone
    it would, and a would hear "received" for a file b never got): b's
    application sees a new transfer, takes it, and only then does a hear
    "received"."""
    a, b = sessions("a"), sessions("b")
    pair(a, b)
    data = os.urandom(300_000)
    tid = a_transfer_id(b, data)
    mb0 = b.events.mark()
    assert a.send_resource(b.peer_id, "cancelled.bin", data, timeout=10) == ("received", None)
    first = deliveries(b, "cancelled.bin", mb0)[0].data["send_id"]
    book = b.member(a.peer_id).verdicts
    assert book.get(offer_key(first, tid, len(data))) == ("received", None)
    ma, mb = a.events.mark(), b.events.mark()
    b.hooks["cancel_on_resource_chunk"] = "lost"
    res = a.send_resource(b.peer_id, "cancelled.bin", data, timeout=20)
    # b delivered the new transfer before a returned: it posts delivery before RESOURCE_RECEIVED
    got = deliveries(b, "cancelled.bin", mb)
    assert res == ("received", None)
    assert "cancel_on_resource_chunk" not in b.hooks, "b's application never cancelled"
    cancelled = named(b, ("resource-cancelled",), "cancelled.bin", mb)
    assert len(cancelled) == 1 and cancelled[0].data["lost"]
    second = cancelled[0].data["send_id"]
    assert second is not None and second != first, "each send draws its own send ID"
    # a kept the send ID on every offer of the send, RESUMED since it read the ACCEPT
    again = named(a, ("resource-offered-again",), "cancelled.bin", ma)
    assert again and all(e.data["resumed"] and e.data["send_id"] == second for e in again), again
    check_resumed_only_after_accept(a, "cancelled.bin", ma)
    # b: never answered from memory; a new transfer, RESUMED, of the second send, delivered once
    assert not b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)
    started = named(b, ("resource-started",), "cancelled.bin", mb)
    assert [(e.data["resumed"], e.data["send_id"]) for e in started][:2] == [(False, second), (True, second)]
    assert not started[1].data["waited"], "a transfer b's application cancelled does not wait"
    assert len(got) == 1 and got[0].data["send_id"] == second
    assert got[0].data["sha256"] == hashlib.sha256(data).hexdigest()
    assert book.get(offer_key(second, tid, len(data))) == ("received", None)
    assert book.get(offer_key(first, tid, len(data))) == ("received", None)
    assert not not_connected(a, ma) and not not_connected(b, mb)


def test_each_send_is_answered_with_its_own_verdict(sessions):
    """§7.9: b remembers a verdict for each of two sends of the same content
    (RESOURCE_RECEIVED for one, RESOURCE_CANCEL 2 for the other, whose
    COMPLETE named a wrong digest). After a lost link, a RESUMED offer of
    each is answered with that send's verdict (by content alone both would
    get the latest), nothing delivered again; a RESUMED offer of a third
    send ID of that content matches neither and is a new transfer."""
    a, b = sessions("a"), sessions("b")
    conn, _ = pair(a, b)
    data = os.urandom(100_000)
    tid = a_transfer_id(b, data)
    good, bad, third = 0x0101010101010101, 0x0202020202020202, 0x0303030303030303
    assert conn.send_resource("twice.bin", data, tid, 10, send_id=good) == ("received", None)
    assert conn.send_resource("twice.bin", data, tid, 10, send_id=bad,
                              sha256=hashlib.sha256(b"other").digest()) == ("cancel", 2)
    book = b.member(a.peer_id).verdicts
    assert book.get(offer_key(good, tid, len(data))) == ("received", None)
    assert book.get(offer_key(bad, tid, len(data))) == ("cancel", 2)
    cut_and_resume(a, b, conn)
    mb = b.events.mark()
    # the older verdict first, then the latest, then the older again
    assert offer_on_carrying(a, b, "twice.bin", data, tid, 10, resumed=True, send_id=good) == ("received", None)
    assert offer_on_carrying(a, b, "twice.bin", data, tid, 10, resumed=True, send_id=bad) == ("cancel", 2)
    assert offer_on_carrying(a, b, "twice.bin", data, tid, 10, resumed=True, send_id=good) == ("received", None)
    assert not deliveries(b, "twice.bin", mb)
    answered = [(e.data["send_id"], e.data["verdict"])
                for e in b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)]
    # each offer once, unless a crossing resumption made one again
    assert len(answered) >= 3 and set(answered) == {(good, ("received", None)), (bad, ("cancel", 2))}
    assert not named(b, ("resource-started",), "twice.bin", mb)
    # RESOURCE_RECEIVED from memory only for the digest that was verified
    assert offer_on_carrying(a, b, "twice.bin", data, tid, 10, resumed=True, send_id=good,
                             sha256=hashlib.sha256(b"other").digest()) == ("cancel", 2)
    # a third send of the same content: no verdict of its own, so a new transfer
    mb = b.events.mark()
    assert offer_on_carrying(a, b, "twice.bin", data, tid, 10, resumed=True, send_id=third) == ("received", None)
    got = deliveries(b, "twice.bin", mb)
    assert len(got) == 1 and got[0].data["send_id"] == third
    started = named(b, ("resource-started",), "twice.bin", mb)
    assert started and started[0].data["resumed"] and not started[0].data["waited"]


def test_a_waiting_transfer_is_taken_up_only_by_its_own_send(sessions):
    """§7.9: a transfer accepted and cut at its first chunk waits for the
    offer of its send. An offer of another send of the same content (no
    RESUMED) is a new transfer and leaves it waiting (by content alone it
    would take it up); the offer of its own send (RESUMED) then takes it up."""
    a, b = sessions("a"), sessions("b")
    conn, _ = pair(a, b)
    data = os.urandom(300_000)
    tid = a_transfer_id(b, data)
    mine, other = 0x0A0A0A0A0A0A0A0A, 0x0B0B0B0B0B0B0B0B
    ma, mb = a.events.mark(), b.events.mark()
    b.hooks["cut_on_resource_chunk"] = True
    res, accepted = conn.offer_resource("waits.bin", data, tid, 10, send_id=mine)
    assert res[0] == "failed" and accepted and conn.closed.is_set()
    assert "cut_on_resource_chunk" not in b.hooks
    assert a.events.wait(lambda e: e.kind == "resumed", 10, since=ma) is not None
    book = b.member(a.peer_id).verdicts
    key = offer_key(mine, tid, len(data))
    assert book.waiting(key, None) and book.get(key) is None
    assert offer_on_carrying(a, b, "waits.bin", data, tid, 10, send_id=other) == ("received", None)
    assert book.waiting(key, None), "another send of the same content took up the waiting transfer"
    assert offer_on_carrying(a, b, "waits.bin", data, tid, 10, resumed=True, send_id=mine) == ("received", None)
    assert not book.waiting(key, None)
    started = [(e.data["send_id"], e.data["resumed"], e.data["waited"])
               for e in named(b, ("resource-started",), "waits.bin", mb)]
    assert started[0] == (mine, False, False)
    assert (other, False, False) in started and (mine, True, True) in started
    assert started.index((other, False, False)) < started.index((mine, True, True))
    assert [e.data["send_id"] for e in deliveries(b, "waits.bin", mb)] == [other, mine]
    assert not b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)


def test_verdict_book_matches_send_id_and_content():
    """§7.9 without sockets: verdicts and waiting transfers by send ID,
    transfer ID and size together."""
    book = VerdictBook(limit=3)
    tid = bytes(range(16))
    k1, k2 = offer_key(1, tid, 10), offer_key(2, tid, 10)
    old, new = object(), object()
    book.accepted(k1, old)
    assert book.waiting(k1, new) and not book.waiting(k2, new) and not book.waiting(k1, old)
    assert not book.waiting(offer_key(1, tid, 11), new) and not book.waiting(offer_key(1, bytes(16), 10), new)
    book.accepted(k1, new)                       # the offer of that send takes it up
    assert not book.waiting(k1, new)
    book.remember(k1, ("received", None), new, b"d" * 32)
    book.remember(k2, ("cancel", 2), None)
    assert book.answer(k1) == (("received", None), b"d" * 32) and book.get(k2) == ("cancel", 2)
    assert book.get(offer_key(3, tid, 10)) is None and not book.waiting(k1, old)
    book.accepted(k2, old)
    book.ended(k2, old)                          # cancelled: nothing waits, the verdict stays
    assert not book.waiting(k2, new) and book.get(k2) == ("cancel", 2)
    for i in range(3, 6):                        # the latest `limit` only
        book.remember(offer_key(i, tid, 10), ("received", None))
    assert book.get(k1) is None and book.get(k2) is None and len(book) == 3


def test_receivers_cancel_is_no_verdict(sessions):
    """§7.9: b's application cancels a transfer it accepted (RESOURCE_CANCEL
    1 reaches a): nothing is remembered for that send and nothing waits, so
    a RESUMED offer of it is a new transfer."""
    a, b = sessions("a"), sessions("b")
    conn, _ = pair(a, b)
    data = os.urandom(300_000)
    tid = a_transfer_id(b, data)
    sid = 0x0C0C0C0C0C0C0C0C
    mb = b.events.mark()
    b.hooks["cancel_on_resource_chunk"] = True
    assert conn.send_resource("no verdict.bin", data, tid, 10, send_id=sid) == ("cancel", 1)
    book = b.member(a.peer_id).verdicts
    key = offer_key(sid, tid, len(data))
    assert book.get(key) is None and not book.waiting(key, None)
    assert conn.send_resource("no verdict.bin", data, tid, 10, resumed=True, send_id=sid) == ("received", None)
    assert len(deliveries(b, "no verdict.bin", mb)) == 1
    assert not b.events.all(lambda e: e.kind == "resource-answered-again", since=mb)
    assert not conn.closed.is_set()
