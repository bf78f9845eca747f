"""§7.10 streams across a lost link, Python to Python on 127.0.0.1: a stream
outlives a reset TCP connection (every byte once, in order), a STREAM_OPEN
or a CLOSED acknowledgement lost with the link, a reader that cancels in the
gap, the 1 MiB hold, the violations of §10, and the receiver's grace. Every
wait is bounded."""
import os
import pathlib
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp import frames as F                        # noqa: E402
from mpcp.session import Session                    # noqa: E402
from mpcp.streams import HOLD                       # noqa: E402
from mpcp.wire import u64                           # noqa: E402

from pystreams import received, writer              # noqa: E402

import peers                                        # noqa: E402
from peers import loopback_sessions                 # noqa: E402


@pytest.fixture
def sessions():
    with loopback_sessions() as make:
        yield make


def pair(a, b):
    """a dials b (version 2, TLS); returns (a's, b's) connection."""
    conn, theirs = peers.pair(a, b)
    assert conn.member is not None and conn.book is not None
    return conn, theirs


def until(fn, timeout, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()


def kinds(s, *names, since=0):
    return s.events.all(lambda e: e.kind in names, since=since)


def writing(sessions, size, name):
    """a (redialling) writes `size` random bytes to b on stream `name`;
    returns (a, b, a's connection, data, stream, writer thread) once b has
    received 1 MiB of it."""
    a = sessions("a")
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    data = os.urandom(size)
    st = a.open_stream(b.peer_id, name)
    t = writer(st, data)
    assert until(lambda: received(b, a.peer_id) >= 1 << 20, 10)
    return a, b, conn, data, st, t


def raw_channel(conn):
    """A new channel number of ours that no stream of ours uses."""
    with conn.chan_lock:
        n = conn.next_channel
        conn.next_channel += 2
        return n


def test_stream_written_across_a_reset_arrives_once_in_order(sessions):
    a, b, conn, data, st, t = writing(sessions, 8 << 20, "big")
    ms_a, ms_b = a.events.mark(), b.events.mark()
    conn.reset()
    assert not kinds(b, "stream"), "the stream ended before the cut: nothing tested"
    resumed = a.events.wait(lambda e: e.kind == "resumed", 10, since=ms_a)
    assert resumed is not None and resumed.data["streams"] == [0], resumed
    ev = b.events.wait(lambda e: e.kind in ("stream", "stream-failed"), 30, since=ms_b)
    assert ev is not None and ev.kind == "stream", ev
    assert ev.data["length"] == len(data) and ev.data["payload"] == data
    assert st.wait(10) == ("closed", len(data))
    t.join(5)
    assert st.resumes == 1
    assert len(kinds(b, "stream")) == 1 and not kinds(b, "stream-failed")
    assert [e.data["outcome"] for e in kinds(a, "stream-sent")] == [("closed", len(data))]
    rs = kinds(b, "stream-resumed")
    assert len(rs) == 1 and rs[0].data["ordinal"] == 0 and not rs[0].data["new"]
    assert not kinds(a, "state", since=ms_a) and not kinds(b, "state", since=ms_b)


def test_stream_whose_open_went_with_the_link_arrives_as_new(sessions):
    a = sessions("a")
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    data = os.urandom(300_000)
    m = a.member(b.peer_id)
    with m.lock:                     # the connection still carries the member: the open goes to it
        conn.reset()
        st = a.open_stream(b.peer_id, "lost open")
    assert st.ordinal == 0
    t = writer(st, data)
    ev = b.events.wait(lambda e: e.kind in ("stream", "stream-failed"), 20)
    assert ev is not None and ev.kind == "stream" and ev.data["payload"] == data, ev
    assert not kinds(b, "stream-opened"), "b read the STREAM_OPEN: nothing tested"
    rs = kinds(b, "stream-resumed")
    assert len(rs) == 1 and rs[0].data["new"] and rs[0].data["ordinal"] == 0 and rs[0].data["received"] == 0
    assert st.wait(10) == ("closed", len(data))
    t.join(5)
    # the next stream takes ordinal 1 on both sides
    st2 = a.send_stream(b.peer_id, "next", b"after")
    assert st2.wait(10) == ("closed", 5) and st2.ordinal == 1
    ev2 = b.events.wait(lambda e: e.kind == "stream" and e.data["name"] == "next", 5)
    assert ev2 is not None and ev2.data["ordinal"] == 1


def test_stream_closed_before_the_cut_whose_closed_ack_was_lost_ends_once(sessions):
    a = sessions("a")
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    b.hooks["no_closed_ack"] = True          # b's STREAM_ACK CLOSED is lost
    data = os.urandom(100_000)
    st = a.send_stream(b.peer_id, "short", data)
    ev = b.events.wait(lambda e: e.kind == "stream", 10)
    assert ev is not None and ev.data["payload"] == data
    assert not st.done.is_set() and st.close_sent        # kept until CLOSED or a reset
    assert a.member(b.peer_id).streams.outgoing.get(0) is st
    del b.hooks["no_closed_ack"]
    ms_b = b.events.mark()
    conn.reset()
    assert st.wait(10) == ("closed", len(data))
    assert b.events.wait(lambda e: e.kind == "stream-resume-ended", 5, since=ms_b) is not None
    assert len(kinds(b, "stream")) == 1 and not kinds(b, "stream-failed")
    assert [e.data["outcome"] for e in kinds(a, "stream-sent")] == [("closed", len(data))]
    assert not a.member(b.peer_id).streams.outgoing


def test_reader_that_cancels_in_the_gap_resets_the_writer_after_resumption(sessions):
    a = sessions("a", redial=False)
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    st = a.open_stream(b.peer_id, "cancelled")
    assert st.write(os.urandom(300_000), 5)
    assert until(lambda: received(b, a.peer_id) == 300_000, 5)
    ms_a, ms_b = a.events.mark(), b.events.mark()
    conn.reset()
    assert a.events.wait(lambda e: e.kind == "lost", 5, since=ms_a) is not None
    assert b.events.wait(lambda e: e.kind == "lost", 5, since=ms_b) is not None
    assert b.cancel_stream(a.peer_id, 0)
    assert st.wait(0) is None                # the writer cannot know yet
    a.redial = True
    assert st.wait(10) == ("reset", 1)
    assert not st.write(b"more", 1)
    failed = kinds(b, "stream-failed")
    assert len(failed) == 1 and failed[0].data["reason"] == "cancelled"
    assert b.events.wait(lambda e: e.kind == "stream-resume-ended", 5, since=ms_b) is not None
    assert not kinds(b, "stream")


def test_stream_opened_and_written_while_suspended_waits_for_the_resumption(sessions):
    a = sessions("a", redial=False)
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    kept = a.open_stream(b.peer_id, "kept")
    assert kept.write(b"one", 5)
    assert until(lambda: received(b, a.peer_id) == 3, 5)
    ms = a.events.mark()
    conn.reset()
    assert a.events.wait(lambda e: e.kind == "lost", 5, since=ms) is not None
    assert kept.write(b"two", 5)             # waits within the stream's buffer
    kept.close()
    new = a.send_stream(b.peer_id, "opened meanwhile", b"three")
    assert new.ordinal is None               # numbered when its STREAM_OPEN goes
    a.redial = True
    assert kept.wait(10) == ("closed", 6) and new.wait(10) == ("closed", 5)
    assert (kept.ordinal, new.ordinal) == (0, 1)
    got = {e.data["name"]: e.data["payload"] for e in kinds(b, "stream")}
    assert got == {"kept": b"onetwo", "opened meanwhile": b"three"}


def test_opener_holds_at_1_MiB_unacknowledged(sessions):
    a = sessions("a")
    b = sessions("b")
    pair(a, b)
    b.hooks["no_stream_ack"] = True
    data = os.urandom(3 << 20)
    st = a.open_stream(b.peer_id, "flood")
    t = writer(st, data, pause=0)
    assert until(lambda: st.held, 10), "the opener never held"
    assert st.sent_max - st.acked == HOLD and st.acked == 0
    assert until(lambda: received(b, a.peer_id) == HOLD, 5)
    assert st.held and st.sent_max == HOLD and received(b, a.peer_id) == HOLD
    del b.hooks["no_stream_ack"]             # acknowledgements go: the rest follows
    ev = b.events.wait(lambda e: e.kind == "stream", 20)
    assert ev is not None and ev.data["payload"] == data
    assert st.wait(10) == ("closed", len(data))
    t.join(5)


def test_receiver_fails_a_kept_stream_not_resumed_within_its_grace(sessions):
    a = sessions("a", redial=False)
    b = sessions("b", redial=False, grace=1.5)
    conn, _ = pair(a, b)
    st = a.open_stream(b.peer_id, "forgotten")
    assert st.write(b"x" * 1000, 5)
    assert until(lambda: received(b, a.peer_id) == 1000, 5)
    a.hooks["skip_stream_resume"] = {0}
    ms_b = b.events.mark()
    conn.reset()
    a.redial = True
    assert b.events.wait(lambda e: e.kind == "resumed", 5, since=ms_b) is not None
    ev = b.events.wait(lambda e: e.kind == "stream-failed", 4, since=ms_b)
    assert ev is not None and ev.data["reason"] == "not resumed", ev
    assert not kinds(b, "state", since=ms_b)


def test_every_stream_fails_on_both_sides_when_the_member_leaves(sessions):
    a = sessions("a", redial=False, grace=1)
    b = sessions("b", redial=False, grace=1)
    conn, _ = pair(a, b)
    st = a.open_stream(b.peer_id, "orphan")
    assert st.write(b"y" * 1000, 5)
    assert until(lambda: received(b, a.peer_id) == 1000, 5)
    conn.reset()
    out = st.wait(5)
    assert out is not None and out[0] == "lost", out
    ev = b.events.wait(lambda e: e.kind == "stream-failed", 5)
    assert ev is not None and "grace" in ev.data["reason"], ev


def payloads(s, since=0):
    return [e.data["payload"] for e in kinds(s, "message", since=since)]


def exports(s, peer):
    m = s.member(peer)
    return (m.resumption_id, m.resumption_key)


def test_two_resumptions_in_one_session_carry_messages_and_streams(sessions):
    """§7.9: the exports of the establishing connection name and prove the
    session for as long as it lasts, so a session resumes as often as its
    link goes: messages and a stream each way arrive once, in order, across
    two resumptions."""
    a = sessions("a")
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    names = exports(a, b.peer_id), exports(b, a.peer_id)
    assert names[0] == names[1] and None not in names[0]
    data_a, data_b = os.urandom(6 << 20), os.urandom(6 << 20)
    st_a = a.open_stream(b.peer_id, "a across two")
    st_b = b.open_stream(a.peer_id, "b across two")
    t_a, t_b = writer(st_a, data_a), writer(st_b, data_b)
    sent = {a: [], b: []}

    def say(src, dst, tag):
        for i in range(20):
            p = b"%s %d" % (tag, i)
            sent[src].append(p)
            src.send_to(dst.peer_id, p)

    ms_a, ms_b = a.events.mark(), b.events.mark()
    for turn in (1, 2):
        say(a, b, b"a%d" % turn)
        say(b, a, b"b%d" % turn)
        assert until(lambda: received(b, a.peer_id) >= turn << 20 and received(a, b.peer_id) >= turn << 20, 15)
        mark = a.events.mark()
        a.member(b.peer_id).conn.reset()
        ev = a.events.wait(lambda e: e.kind == "resumed", 10, since=mark)
        assert ev is not None, ("resumption %d" % turn, kinds(a, "lost", "resume-ended", "state", since=mark))
        assert sorted(ev.data["streams"]) == [0], ev
    say(a, b, b"a3")
    say(b, a, b"b3")
    got_a = b.events.wait(lambda e: e.kind in ("stream", "stream-failed") and e.data["name"] == "a across two", 30)
    got_b = a.events.wait(lambda e: e.kind in ("stream", "stream-failed") and e.data["name"] == "b across two", 30)
    assert got_a is not None and got_a.kind == "stream" and got_a.data["payload"] == data_a, got_a
    assert got_b is not None and got_b.kind == "stream" and got_b.data["payload"] == data_b, got_b
    assert st_a.wait(10) == ("closed", len(data_a)) and st_b.wait(10) == ("closed", len(data_b))
    t_a.join(5)
    t_b.join(5)
    assert st_a.resumes == 2 and st_b.resumes == 2
    assert until(lambda: payloads(b, ms_b) == sent[a] and payloads(a, ms_a) == sent[b], 5), \
        (payloads(b, ms_b), payloads(a, ms_a))
    assert len(kinds(a, "resumed", since=ms_a)) == 2 and len(kinds(b, "resumed", since=ms_b)) == 2
    assert not kinds(a, "state", since=ms_a) and not kinds(b, "state", since=ms_b)
    assert (exports(a, b.peer_id), exports(b, a.peer_id)) == names


def test_a_loss_between_the_two_resumes_leaves_the_session_resumable(sessions):
    """§7.9: a resumption connection lost after one side checked the peer's
    RESUME and before the other did: both still hold the session's ID and
    key, and the next resumption gets through."""
    a, b, conn, data, st, t = writing(sessions, 3 << 20, "between")
    ms_a, ms_b = a.events.mark(), b.events.mark()

    def cut_once_a_checked(theirs):
        # b, before checking a's RESUME: wait until a has checked b's, then the link goes
        assert a.events.wait(lambda e: e.kind == "resumed", 5, since=ms_a) is not None
        theirs._cut("cut between the two RESUMEs (test hook)")
    b.hooks["before_resume_check"] = cut_once_a_checked
    for i in range(10):
        a.send_to(b.peer_id, b"m%d" % i)
    conn.reset()
    assert until(lambda: len(kinds(a, "resumed", since=ms_a)) == 2, 15), \
        kinds(a, "lost", "resume-ended", "state", since=ms_a)
    assert "before_resume_check" not in b.hooks
    # b checks a's RESUME on the second connection a moment after a checked b's
    assert until(lambda: len(kinds(b, "resumed", since=ms_b)) == 1, 5), kinds(b, "resumed", "lost", since=ms_b)
    for i in range(10, 20):
        a.send_to(b.peer_id, b"m%d" % i)
    ev = b.events.wait(lambda e: e.kind in ("stream", "stream-failed"), 30, since=ms_b)
    assert ev is not None and ev.kind == "stream" and ev.data["payload"] == data, ev
    assert st.wait(10) == ("closed", len(data))
    t.join(5)
    want = [b"m%d" % i for i in range(20)]
    assert until(lambda: payloads(b, ms_b) == want, 5), payloads(b, ms_b)
    assert not kinds(a, "state", since=ms_a) and not kinds(b, "state", since=ms_b)


def test_a_different_name_in_stream_resume_is_ignored(sessions):
    """§7.10: a resumed stream keeps the name its STREAM_OPEN gave it."""
    a = sessions("a", redial=False)
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    st = a.open_stream(b.peer_id, "first name")
    assert st.write(b"n" * 1000, 5)
    assert until(lambda: received(b, a.peer_id) == 1000, 5)
    ms_b = b.events.mark()
    conn.reset()
    assert a.events.wait(lambda e: e.kind == "lost", 5) is not None
    st.name = "second name"                  # its STREAM_RESUME names it so
    assert st.write(b"m" * 1000, 5)
    st.close()
    a.redial = True
    assert st.wait(10) == ("closed", 2000)
    rs = kinds(b, "stream-resumed", since=ms_b)
    assert len(rs) == 1 and rs[0].data["name"] == "first name" and not rs[0].data["new"], rs
    ev = kinds(b, "stream", since=ms_b)
    assert len(ev) == 1 and ev[0].data["name"] == "first name" and ev[0].data["payload"] == b"n" * 1000 + b"m" * 1000


@pytest.mark.parametrize("off", ["both", "receiver", "opener"])
def test_streams_are_acknowledged_whatever_either_side_recovers(sessions, off):
    """§7.10: link recovery is the connection's (version 2, TLS): a side that
    does not recover itself still acknowledges streams and takes STREAM_ACK."""
    a = sessions("a", recovery=off in ("both", "opener"))
    b = sessions("b", recovery=off in ("both", "receiver"))
    conn = a.connect(b.make_connection_data(a.peer_id))
    assert a.events.wait(lambda e: e.kind == "state" and e.data["state"] == "connected", 5)
    assert b.events.wait(lambda e: e.kind == "state" and e.data["state"] == "connected", 5)
    assert conn.link_recovery and conn.book is not None
    data = os.urandom(600_000)
    st = a.send_stream(b.peer_id, "acked anyway", data)
    assert st.wait(10) == ("closed", len(data))      # b's STREAM_ACK with CLOSED ended it
    assert st.acked == len(data)
    ev = b.events.wait(lambda e: e.kind == "stream", 5)
    assert ev is not None and ev.data["payload"] == data


def test_stream_reset_other_than_1_answering_a_resume_is_the_receivers_reset(sessions):
    """§7.10: STREAM_RESET 1 answering the STREAM_RESUME of a stream the
    opener had closed ends it (the receiver read its end, or ended it
    itself); a refusal (STREAM_RESET 3) of a stream new to the receiver is
    a reset by the receiver, not a success."""
    from mpcp.channels import _Channel
    from mpcp.streams import OutStream, StreamBook
    s = sessions("a", listen=False, datagrams=False)
    outcomes = {}
    for code in (1, 3):
        for had in ("closed", "reset"):
            st = OutStream(s, StreamBook(), s.peer_id, "answered")
            st.ordinal, st.written, st.closing, st.close_sent = 0, 10, True, had == "closed"
            if had == "reset":
                st.reset_code = 1
            ch = _Channel(1, "stream", "answered", mine=True)
            ch.awaiting = True
            ch.reset_sent = had == "reset"
            st.on_reset(ch, code)
            outcomes[(code, had)] = st.wait(1)
    assert outcomes == {(1, "closed"): ("closed", 10), (1, "reset"): ("cancelled", None),
                        (3, "closed"): ("reset", 3), (3, "reset"): ("cancelled", None)}


# ------------------------------------------------------------ violations (§10)
def goodbye(s, since, timeout=5):
    return s.events.wait(lambda e: e.kind == "goodbye", timeout, since=since)


def test_stream_resume_ordinal_above_the_count_is_a_protocol_error(sessions):
    a = sessions("a")
    b = sessions("b")
    conn, _ = pair(a, b)
    n = raw_channel(conn)
    conn.send_raw(F.frame(F.STREAM_RESUME, F.StreamResume(0, "x").encode_payload(), n))
    ev = b.events.wait(lambda e: e.kind == "stream-resumed", 5)
    assert ev is not None and ev.data["new"] and ev.data["ordinal"] == 0     # the count: a new stream
    ms = a.events.mark()
    conn.send_raw(F.frame(F.STREAM_RESUME, F.StreamResume(2, "y").encode_payload(), raw_channel(conn)))
    bye = goodbye(a, ms)
    assert bye is not None and bye.data["reason"] == 1, bye


def test_resume_of_a_stream_this_connection_carries_is_a_protocol_error(sessions):
    """§7.10/§10: a stream is on one channel at a time."""
    a = sessions("a")
    b = sessions("b")
    conn, _ = pair(a, b)
    st = a.open_stream(b.peer_id, "open here")
    assert st.write(b"o" * 100, 5)
    assert until(lambda: received(b, a.peer_id) == 100, 5)
    ma = a.events.mark()
    conn.send_raw(F.frame(F.STREAM_RESUME, F.StreamResume(0, "open here").encode_payload(), raw_channel(conn)))
    bye = goodbye(a, ma)
    assert bye is not None and bye.data["reason"] == 1, bye


def test_stream_resume_of_an_ended_stream_outside_a_resumption_is_answered_reset_1(sessions):
    """§7.10 (SPEC-GAPS 31): on any connection with link recovery an ordinal
    below the count whose stream ended is answered STREAM_RESET 1."""
    a = sessions("a")
    b = sessions("b")
    conn, theirs = pair(a, b)
    st = a.send_stream(b.peer_id, "done", b"d" * 10)
    assert st.wait(5) == ("closed", 10)
    n = raw_channel(conn)
    mb = b.events.mark()
    conn.send_raw(F.frame(F.STREAM_RESUME, F.StreamResume(0, "done").encode_payload(), n))
    ev = b.events.wait(lambda e: e.kind == "stream-resume-ended", 5, since=mb)
    assert ev is not None and ev.data["channel"] == n, ev
    conn.send_raw(F.frame(F.STREAM_RESET, (1).to_bytes(2, "big"), n))    # discarded: b reset it
    assert b.events.wait(lambda e: e.kind == "refused-channel-ended", 5, since=mb) is not None
    assert not kinds(b, "goodbye") and not kinds(a, "goodbye") and not theirs.closed.is_set()


@pytest.mark.parametrize("case", ["above sent", "backwards", "closed early", "closed wrong count"])
def test_bad_stream_ack_is_a_protocol_error(sessions, case):
    a = sessions("a")
    b = sessions("b")
    conn, theirs = pair(a, b)
    b.hooks["no_closed_ack"] = True
    st = a.open_stream(b.peer_id, "acked")
    assert st.write(b"z" * 1000, 5)
    assert until(lambda: received(b, a.peer_id) == 1000, 5)
    ch = b.incoming_streams(a.peer_id)[0].channel.number
    theirs.send_raw(F.frame(F.STREAM_ACK, u64(600), ch))
    assert until(lambda: st.acked == 600, 5)                  # a good one counts
    mb = b.events.mark()
    if case == "above sent":
        theirs.send_raw(F.frame(F.STREAM_ACK, u64(1001), ch))
    elif case == "backwards":
        theirs.send_raw(F.frame(F.STREAM_ACK, u64(599), ch))
    elif case == "closed early":
        theirs.send_raw(F.frame(F.STREAM_ACK, u64(1000), ch, F.FLAG_CLOSED))
    else:
        st.close()
        assert b.events.wait(lambda e: e.kind == "stream", 5) is not None
        theirs.send_raw(F.frame(F.STREAM_ACK, u64(999), ch, F.FLAG_CLOSED))
    bye = goodbye(b, mb)
    assert bye is not None and bye.data["reason"] == 1, (case, bye)


def test_stream_data_before_the_answer_is_a_protocol_error(sessions):
    a = sessions("a")
    b = sessions("b")
    conn, theirs = pair(a, b)
    b.hooks["hold_resume_answer"] = 1.0      # b answers a second late
    n = raw_channel(conn)
    conn.send_raw(F.frame(F.STREAM_RESUME, F.StreamResume(0, "early").encode_payload(), n))
    assert until(lambda: n in theirs.channels and not theirs.channels[n].answer_pending, 3)
    conn.send_raw(F.frame(F.STREAM_DATA, b"ok", n))                 # after the answer: taken
    assert until(lambda: received(b, a.peer_id) == 2, 3)
    ma = a.events.mark()
    n = raw_channel(conn)
    conn.send_raw(F.frame(F.STREAM_RESUME, F.StreamResume(1, "too early").encode_payload(), n)
                  + F.frame(F.STREAM_DATA, b"abc", n))
    bye = goodbye(a, ma)
    assert bye is not None and bye.data["reason"] == 1, bye


@pytest.mark.parametrize("kind", ["plaintext", "version 1"])
def test_stream_resumption_frames_without_link_recovery(sessions, kind):
    """STREAM_RESUME and STREAM_ACK on a plaintext version 2 or a version 1
    connection: GOODBYE 1. On the TLS version 2 pair the same frame opens a
    stream (checked in the ordinal test above)."""
    for frame in (F.frame(F.STREAM_RESUME, F.StreamResume(0, "x").encode_payload(), 1),
                  F.frame(F.STREAM_ACK, u64(0), 2)):
        if kind == "plaintext":
            a = Session("a", "none")
            b = Session("b", "none")
        else:
            a = Session("a", "required", max_version=1)
            b = Session("b", "required")
        try:
            conn = a.connect(b.make_connection_data(a.peer_id))
            assert a.events.wait(lambda e: e.kind == "state" and e.data["state"] == "connected", 5)
            assert b.events.wait(lambda e: e.kind == "state" and e.data["state"] == "connected", 5)
            assert conn.book is None and conn.outcome == ("plaintext" if kind == "plaintext" else "tls")
            ma = a.events.mark()
            conn.send_raw(frame)
            bye = goodbye(a, ma)
            assert bye is not None and bye.data["reason"] == 1, bye
        finally:
            a.close()
            b.close()


def test_window_update_before_the_answer_is_a_protocol_error(sessions):
    """§7.10: the receiver's answer comes before anything else it sends on
    the channel (SPEC-GAPS 33)."""
    a = sessions("a", redial=False)
    b = sessions("b", redial=False)
    conn, _ = pair(a, b)
    st = a.open_stream(b.peer_id, "w")
    assert st.write(b"w" * 10, 5)
    assert until(lambda: received(b, a.peer_id) == 10, 5)
    b.hooks["hold_resume_answer"] = 2.0
    ms_b = b.events.mark()
    conn.reset()
    a.redial = True
    ev = b.events.wait(lambda e: e.kind == "stream-resumed", 5, since=ms_b)
    assert ev is not None
    theirs = b.member(a.peer_id).conn
    theirs.send_raw(F.frame(F.WINDOW_UPDATE, (1000).to_bytes(4, "big"), ev.data["channel"]))
    bye = goodbye(b, ms_b)
    assert bye is not None and bye.data["reason"] == 1, bye
