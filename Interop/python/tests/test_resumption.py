"""§7.9 link recovery, Python to Python on 127.0.0.1: a resumption connection
(dialed or accepted) that fails before it carries the member ends quietly and
leaves the member suspended; only the grace period or a GOODBYE other than 7
from a pinned listener ends it. Ordinary connections still report
notConnected. Every wait is bounded."""
import os
import pathlib
import socket
import struct
import sys
import threading
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp.connection_data import ConnectionData     # noqa: E402
from mpcp.encodings import Endpoint, PeerID         # noqa: E402
from mpcp.preamble import Preamble, REQUIRED        # noqa: E402
from mpcp.session import Session                    # noqa: E402

import peers                                        # noqa: E402
from peers import identity                          # noqa: E402


def rst(sock):
    """Close with a TCP RST (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def preamble_then_reset(sock, timeout=3.0):
    """Our side of a connection that fails in the TLS handshake: exchange
    preambles (version 2, TLS), read what comes next (a ClientHello, or
    nothing from a server), then reset."""
    sock.settimeout(timeout)
    try:
        sock.sendall(Preamble(REQUIRED, True, 1, 2).encode())
        got = b""
        while len(got) < 8:
            chunk = sock.recv(8 - len(got))
            if not chunk:
                break
            got += chunk
        sock.settimeout(0.3)
        try:
            sock.recv(4096)             # the dialer's ClientHello (a server sends nothing yet)
        except (socket.timeout, OSError):
            pass
    except (socket.timeout, OSError):
        pass
    rst(sock)


class ResettingListener:
    """A listener on 127.0.0.1 that accepts and resets every connection
    during its TLS handshake."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.resets = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                s, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            # Counted first: the dialer may see the reset before this thread runs on.
            self.resets += 1
            preamble_then_reset(s)

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


def pair(a, b):
    """a dials b; both connected (version 2, TLS). Returns (a's, b's) connection."""
    conn, theirs = peers.pair(a, b)
    assert conn.version == 2 and conn.member is not None
    return conn, theirs


def states(s, since):
    return s.events.all(lambda e: e.kind == "state", since=since)


def lose(s, conn, since):
    """Reset s's connection carrying a member; wait until s has suspended it."""
    conn.reset()
    assert s.events.wait(lambda e: e.kind == "lost", 3, since=since) is not None
    m = s.member(conn.peer_id)
    assert m is not None and m.state == "suspended"
    return m


@pytest.fixture
def sessions():
    made = []

    def make(*args, **kw):
        s = Session(*args, **kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def test_resumption_dial_reset_in_tls_keeps_member_suspended(sessions):
    """Our resumption dial meets a listener that resets the TLS handshake:
    no state event, the member stays suspended until the grace passes."""
    evil = ResettingListener()
    try:
        a = sessions("a", "required", identity=identity("alice"), listen=False, grace=2.5)
        b = sessions("b", "required", identity=identity("bob"), redial=False, grace=30)
        conn, _ = pair(a, b)
        a.member(b.peer_id).listen_ep = ("127.0.0.1", evil.port)   # where the peer "listens" now
        ms = a.events.mark()
        m = lose(a, conn, ms)
        ended = a.events.wait(lambda e: e.kind == "resume-ended" and "tls handshake failed"
                              in (e.data.get("reason") or ""), 4, since=ms)
        assert ended is not None, a.events.all(lambda e: True, since=ms)
        assert evil.resets >= 1
        assert not states(a, ms), states(a, ms)
        assert m.state == "suspended" and a.member(b.peer_id) is m
        # only the grace period ends it
        left = a.events.wait(lambda e: e.kind == "state", 4, since=ms)
        assert left is not None and left.data["state"] == "notConnected"
        assert "grace" in left.data["reason"], left
        assert m.state == "left" and a.member(b.peer_id) is None
    finally:
        evil.close()


def test_accepted_connection_reset_in_tls_while_suspended(sessions):
    """A connection to our listener while a member is suspended (it may be
    the peer's resumption; before its HELLO we cannot tell) is reset in the
    TLS handshake: no connecting/notConnected, the member stays suspended."""
    a = sessions("a", "required", identity=identity("alice"), redial=False, grace=30)
    b = sessions("b", "required", identity=identity("bob"), redial=False, grace=30)
    _, mine = pair(b, a)
    ms = a.events.mark()
    m = lose(a, mine, ms)
    s = socket.create_connection(("127.0.0.1", a.listen_port), timeout=3)
    preamble_then_reset(s)
    ended = a.events.wait(lambda e: e.kind in ("resume-ended", "state"), 4, since=ms)
    assert ended is not None
    assert ended.kind == "resume-ended", ended
    assert "tls handshake failed" in ended.data["reason"], ended
    time.sleep(0.2)
    assert not states(a, ms), states(a, ms)
    assert m.state == "suspended" and a.member(b.peer_id) is m


def test_ordinary_connection_failures_still_report_not_connected(sessions):
    """Without a member at stake a failed dial or accepted connection still
    posts notConnected."""
    evil = ResettingListener()
    try:
        a = sessions("a", "required", identity=identity("alice"))
        other = PeerID.new("x")
        data = ConnectionData(REQUIRED, os.urandom(16), a.peer_id.identifier, other, None,
                              [Endpoint("127.0.0.1", evil.port)]).encode()
        c = a.connect(data)
        ev = a.events.wait(lambda e: e.kind == "state" and e.data["conn"] is c
                           and e.data["state"] == "notConnected", 5)
        assert ev is not None and "tls handshake failed" in ev.data["reason"], ev
        ms = a.events.mark()
        s = socket.create_connection(("127.0.0.1", a.listen_port), timeout=3)
        preamble_then_reset(s)
        ev = a.events.wait(lambda e: e.kind == "state" and e.data["state"] == "notConnected", 5, since=ms)
        assert ev is not None and "tls handshake failed" in ev.data["reason"], ev
    finally:
        evil.close()


def test_wrong_listener_proof_dialer_sends_goodbye_1_and_stays_suspended(sessions):
    """§7.9: a dialer closes a wrong listener proof with GOODBYE 1 (not 9)
    and may dial again: the wrong proof itself ends nothing."""
    a = sessions("a", "required", identity=identity("alice"), listen=False, grace=30)
    b = sessions("b", "required", identity=identity("bob"), redial=False, grace=30)
    conn, _ = pair(a, b)
    b.hooks["resume_proof"] = lambda p: bytes([p[0] ^ 1]) + p[1:]
    ms, mb = a.events.mark(), b.events.mark()
    lose(a, conn, ms)
    ended = a.events.wait(lambda e: e.kind == "resume-ended", 4, since=ms)
    assert ended is not None and "proof" in ended.data["reason"], ended
    bye = b.events.wait(lambda e: e.kind == "goodbye", 3, since=mb)
    assert bye is not None and bye.data["reason"] == 1, bye
    assert not [e for e in states(a, ms) if "proof" in (e.data.get("reason") or "")]


@pytest.mark.parametrize("pinned", [True, False])
def test_goodbye_9_on_resumption_ends_member_only_from_pinned_listener(sessions, pinned):
    """§7.9: GOODBYE 9 (any but 7) on our resumption dial gives the member up
    when we pinned the listener's certificate; without identities it proves
    nothing and the member stays suspended for the grace period."""
    ids = ("alice", "bob") if pinned else (None, None)
    a = sessions("a", "required", identity=identity(ids[0]), listen=False, grace=30)
    b = sessions("b", "required", identity=identity(ids[1]), redial=False, grace=30)
    conn, _ = pair(a, b)
    ms = a.events.mark()
    with b.lock:
        b.members.clear()               # b forgot the session: it answers GOODBYE 9
    m = lose(a, conn, ms)
    bye = a.events.wait(lambda e: e.kind == "goodbye" and e.data["reason"] == 9, 4, since=ms)
    assert bye is not None
    time.sleep(0.3)
    if pinned:
        ev = a.events.wait(lambda e: e.kind == "state", 2, since=ms)
        assert ev is not None and ev.data["state"] == "notConnected", ev
        assert m.state == "left"
    else:
        assert not states(a, ms), states(a, ms)
        assert m.state == "suspended" and a.member(b.peer_id) is m


def test_goodbye_7_on_carrying_connection_is_a_loss(sessions):
    """§7.9: GOODBYE 7 on a connection carrying the member (the peer took a
    resumption instead) is a loss, not the member's end."""
    a = sessions("a", "required", identity=identity("alice"), redial=False, grace=30)
    b = sessions("b", "required", identity=identity("bob"), redial=False, grace=30)
    conn, theirs = pair(a, b)
    ms = a.events.mark()
    theirs.superseded = True
    theirs.abort(7, "duplicateConnection (test)")
    assert a.events.wait(lambda e: e.kind == "goodbye" and e.data["reason"] == 7, 3, since=ms) is not None
    assert a.events.wait(lambda e: e.kind == "lost", 3, since=ms) is not None
    m = a.member(b.peer_id)
    assert m is not None and m.state == "suspended"
    assert not states(a, ms), states(a, ms)
