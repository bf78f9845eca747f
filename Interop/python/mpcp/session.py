"""A session: one peer ID, a TCP listener, a UDP socket, its connections, and
the application's side (trust decisions, tokens, events)."""
import os
import select
import socket
import threading
import time

from . import datagram as D
from . import frames as F
from . import resumption as R
from .connection import Connection
from .connection_data import ConnectionData
from .encodings import PeerID, Endpoint
from .events import EventLog
from .preamble import PREFERENCE_NAMES, TLS
from .member import Member
from .channels import new_send_id
from .resources import VerdictBook, VERDICTS_KEPT, transfer_id as R_ID
from .streams import OutStream, resume_frames
from .tls import Identity, verify_chain, fingerprint

TOKEN_LIFETIME = 120.0


class Session:
    def __init__(self, name="python", preference="required", identity: Identity = None,
                 trust="accept", keepalive=2.0, dead_peer=9.0, handshake_deadline=10.0,
                 trust_timeout=30.0, datagrams=True, listen=True, datagrams_per_epoch=2 ** 32,
                 max_version=F.LATEST_VERSION, recovery=True, grace=10.0, redial=True):
        # §3: we offer versions 1..max_version; 1 makes this a version 1 peer.
        # §7.9 on version 2 TLS connections: keep a lost member for `grace`
        # seconds, redial it (unless redial is False) and admit its resumption.
        self.max_version = max_version
        self.recovery = recovery
        self.grace = grace
        self.redial = redial
        self.members = {}               # identifier -> Member (version 2, TLS)
        # §8: a sender moves to epoch E+1 before its counter in E reaches 2^32;
        # a smaller count makes the sender change epochs within a few datagrams.
        self.datagrams_per_epoch = datagrams_per_epoch
        self.peer_id = PeerID.new(name)
        self.preference = PREFERENCE_NAMES[preference] if isinstance(preference, str) else preference
        self.identity = identity
        self.trust = trust
        self.keepalive = keepalive
        self.dead_peer = dead_peer
        self.handshake_deadline = handshake_deadline
        self.trust_timeout = trust_timeout
        self.events = EventLog()
        self.hooks = {}                 # test hooks: "preamble" bytes, "hello" fn
        self.keep_channel_data = True
        self.refuse_resources = False
        self.refuse_streams = False
        self.verdicts_kept = VERDICTS_KEPT  # §7.9 verdicts remembered per member
        self.tokens = {}                # token -> (for identifier, expiry)
        self.lock = threading.Lock()
        self.connections = []
        self.by_rid = {}
        self.introductions = {}         # introduced identifier -> (introducer identifier, expiry)
        self.mesh = True
        self.closing = threading.Event()
        self.listen_sock = None
        self.listen_port = 0
        self.udp = None
        self.udp_port = 0
        if listen:
            self.listen_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listen_sock.bind(("127.0.0.1", 0))
            self.listen_sock.listen(16)
            self.listen_port = self.listen_sock.getsockname()[1]
            threading.Thread(target=self._accept_loop, daemon=True, name="mpcp-accept").start()
        if datagrams:
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind(("127.0.0.1", 0))
            self.udp_port = self.udp.getsockname()[1]
            threading.Thread(target=self._udp_loop, daemon=True, name="mpcp-udp").start()

    # ---------------------------------------------------------- trust
    def trust_decision(self, conn, chain, code) -> bool:
        t = self.trust
        if callable(t):
            return bool(t(conn, chain, code))
        if t == "accept":
            return True
        if t == "reject":
            return False
        if isinstance(t, str) and t.startswith("ca:"):
            return verify_chain(chain, t[3:])
        raise ValueError("trust policy %r" % (t,))

    # ------------------------------------------------ connection data
    def make_connection_data(self, for_peer) -> bytes:
        ident = for_peer.identifier if isinstance(for_peer, PeerID) else for_peer
        token = os.urandom(16)
        with self.lock:
            self.tokens[token] = (ident, time.monotonic() + TOKEN_LIFETIME)
        return ConnectionData(self.preference, token, ident, self.peer_id,
                              self.identity.fingerprint if self.identity else None,
                              [Endpoint("127.0.0.1", self.listen_port)]).encode()

    def redeem_token(self, token, dialer_ident) -> bool:
        """§9.3: a token is good for 120 s, from the named peer only, once."""
        with self.lock:
            entry = self.tokens.get(token)
            if entry is None or entry[0] != dialer_ident or entry[1] < time.monotonic():
                return False
            del self.tokens[token]
            return True

    # ----------------------------------------------------- connecting
    def connect(self, data: bytes, timeout=5.0) -> Connection:
        cd = ConnectionData.decode(data)
        if cd.for_peer != self.peer_id.identifier:
            raise ValueError("connection data was made for another peer")
        eps = [e for e in cd.endpoints if not e.is_link_local]
        last = None
        for ep in eps:
            fam = socket.AF_INET6 if ":" in ep.host else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect((ep.host, ep.port))
            except OSError as e:
                s.close()
                last = e
                continue
            conn = Connection(self, s, dialer=True, data=cd)
            with self.lock:
                self.connections.append(conn)
            conn.start()
            return conn
        raise ConnectionError("no endpoint answered: %s" % last)

    def _accept_loop(self):
        while not self.closing.is_set():
            r, _, _ = select.select([self.listen_sock], [], [], 0.2)
            if not r:
                continue
            try:
                s, _ = self.listen_sock.accept()
            except OSError:
                continue
            conn = Connection(self, s, dialer=False)
            with self.lock:
                self.connections.append(conn)
            conn.start()

    def other_connections(self, ident, other_than):
        with self.lock:
            return [c for c in self.connections if c is not other_than and not c.closed.is_set()
                    and c.peer_id is not None and c.peer_id.identifier == ident]

    def has_connected(self, ident, other_than) -> bool:
        with self.lock:
            return any(c is not other_than and c.connected and not c.closed.is_set()
                       and c.peer_id and c.peer_id.identifier == ident for c in self.connections)

    def _register_connected(self, conn):
        if conn.purpose == F.PURPOSE_RESUMPTION or conn.peer_hello.purpose == F.PURPOSE_RESUMPTION:
            with self.lock:
                self.by_rid[conn.my_rid] = conn
            return
        with self.lock:
            self.by_rid[conn.my_rid] = conn
            others = [c for c in self.connections if c is not conn and c.connected and not c.closed.is_set()]
        if self.mesh and others and conn.purpose != F.PURPOSE_MESH and conn.peer_hello.purpose != F.PURPOSE_MESH:
            self._introduce(conn, others)

    # ---------------------------------------------------------- mesh (§7.4)
    def _entry(self, c):
        return (c.peer_id, Endpoint(c.peer_addr, c.peer_hello.listen_port))

    def _introduce(self, newcomer, others):
        newcomer.enqueue(F.frame(F.MESH_INTRODUCTION,
                                 F.MeshIntroduction([self._entry(c) for c in others[:6]]).encode_payload()))
        for c in others:
            c.enqueue(F.frame(F.MESH_INTRODUCTION, F.MeshIntroduction([self._entry(newcomer)]).encode_payload()))

    def on_introduction(self, introducer, entries):
        for pid, ep in entries:
            if pid.identifier == self.peer_id.identifier:
                continue
            with self.lock:
                self.introductions[pid.identifier] = (introducer.peer_id.identifier, time.monotonic() + 60)
            they_listen, we_listen = ep.port != 0, self.listen_port != 0
            if they_listen and we_listen:
                we_dial = self.peer_id.identifier > pid.identifier
            else:
                we_dial = they_listen and not we_listen
            if we_dial and self.connection_to(pid.identifier) is None:
                threading.Thread(target=self._dial_introduced, args=(introducer.peer_id, pid, ep),
                                 daemon=True).start()

    def dial(self, ep, purpose, token, expected=None):
        """Dial an endpoint with a HELLO purpose and token of our choosing."""
        s = socket.socket(socket.AF_INET6 if ":" in ep.host else socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect((ep.host, ep.port))
        except OSError:
            s.close()
            return None
        conn = Connection(self, s, dialer=True, purpose=purpose, token=token, expected=expected)
        with self.lock:
            self.connections.append(conn)
        conn.start()
        return conn

    def _dial_introduced(self, introducer, pid, ep):
        for attempt in range(4):
            mark = self.events.mark()
            conn = self.dial(ep, F.PURPOSE_MESH, introducer.identifier, expected=pid)
            if conn is None:
                return
            conn.closed.wait(self.handshake_deadline + self.trust_timeout)
            if conn.connected or self.connection_to(pid.identifier):
                return
            bye = self.events.all(lambda e: e.kind == "goodbye" and e.data.get("conn") is conn, since=mark)
            if not bye or bye[0].data["reason"] != 9:
                return
            time.sleep(0.25)

    def admit_introduced(self, introducer_ident, dialer_ident) -> bool:
        with self.lock:
            entry = self.introductions.get(dialer_ident)
            ok = (entry is not None and entry[0] == introducer_ident and entry[1] >= time.monotonic()
                  and any(c.connected and c.peer_id.identifier == introducer_ident for c in self.connections))
            if ok:
                del self.introductions[dialer_ident]
            return ok

    def _forget(self, conn):
        with self.lock:
            if conn in self.connections:
                self.connections.remove(conn)
            if self.by_rid.get(conn.my_rid) is conn:
                del self.by_rid[conn.my_rid]

    def connection_to(self, ident) -> Connection:
        with self.lock:
            for c in self.connections:
                if c.connected and c.peer_id and c.peer_id.identifier == ident and not c.closed.is_set():
                    return c
        return None

    # ------------------------------------------------ link recovery (§7.9)
    def _establish(self, conn):
        """Both TRUST accepted on a version 2 TLS connection: the member's
        session begins, named by this connection's exports."""
        m = Member(conn.peer_id)
        m.verdicts = VerdictBook(self.verdicts_kept)
        m.resumption_id, m.resumption_key = R.exported(conn.transport)
        m.listen_ep = (conn.peer_addr, conn.peer_hello.listen_port)
        m.peer_fp = fingerprint(conn.peer_chain[0]) if conn.peer_chain else None
        m.conn = conn
        conn.member = m
        with self.lock:
            old = self.members.get(conn.peer_id.identifier)
            self.members[conn.peer_id.identifier] = m
        if old is not None:
            with old.lock:
                old.state = "left"
                old.episode += 1
            old.streams.fail_all("the peer started a new session")

    def send_to(self, ident, payload: bytes, fragment=65536):
        """Send a reliable message to a peer, whatever connection carries it
        now: a suspended member keeps it for the resumption."""
        ident = getattr(ident, "identifier", ident)
        with self.lock:
            m = self.members.get(ident)
        if m is not None and m.state != "left":
            with m.lock:
                if m.conn is None:
                    pieces = [payload[i:i + fragment] for i in range(0, len(payload), fragment)] or [b""]
                    m.send(b"".join(F.frame(F.MESSAGE, p, flags=F.FLAG_END if i == len(pieces) - 1 else 0)
                                    for i, p in enumerate(pieces)))
                    return
                conn = m.conn
            return conn.send_message(payload, fragment)
        conn = self.connection_to(ident)
        if conn is None:
            raise RuntimeError("not connected")
        conn.send_message(payload, fragment)

    def member(self, ident):
        with self.lock:
            return self.members.get(getattr(ident, "identifier", ident))

    def may_be_resumed(self) -> bool:
        """§7.9: a member (connected or suspended) whose peer may resume it on
        a connection to our listener, which we cannot tell before its HELLO."""
        with self.lock:
            return any(m.state != "left" for m in self.members.values())

    def _suspend(self, m, conn, reason):
        """Under m.lock: the member's link is lost; recover for the grace period."""
        m.state = "suspended"
        m.episode += 1
        m.resumed.clear()
        self.events.post("lost", m.peer_id, conn=conn, reason=reason)
        threading.Thread(target=self._recover, args=(m, m.episode), daemon=True, name="mpcp-recover").start()

    def _connection_ended(self, conn, lost):
        m = conn.member
        with m.lock:
            if m.conn is conn:
                m.conn = None
                if lost and m.state == "connected" and not self.closing.is_set():
                    self._suspend(m, conn, conn.end_reason)
                    return
                self._member_left(m, conn.end_reason, conn)
                return
            # a resumption connection (ours or the peer's) that never carried the
            # member: it ends quietly and the member stays suspended (§7.9)
            if m.dialing is conn:
                m.dialing = None
            if m.admitted is conn:
                m.admitted = None
                if m.state == "connected" and m.conn is None:
                    # it had replaced the connection that carried the member (GOODBYE 7)
                    # and failed before carrying it: the link is lost now
                    if self.closing.is_set():
                        self._member_left(m, conn.end_reason, conn)
                    else:
                        self._suspend(m, conn, "resumption failed after replacing the link: %s"
                                      % conn.end_reason)
            # §7.9: GOODBYE 9 (or any but 7) on our resumption dial gives the member up
            # only from a listener whose certificate we pinned; without an identity a
            # GOODBYE proves nothing about who sent it, and the grace period decides
            gave_up = (conn.dialer and conn.purpose == F.PURPOSE_RESUMPTION and m.peer_fp is not None
                       and conn.got_goodbye is not None and conn.got_goodbye != 7)
        self.events.post("resume-ended", m.peer_id, conn=conn, reason=conn.end_reason)
        if gave_up and m.state == "suspended":
            self._member_left(m, conn.end_reason, conn)

    def _member_left(self, m, reason, conn=None):
        with m.lock:
            if m.state == "left":
                return
            m.state = "left"
            m.episode += 1
            m.conn = None
        with self.lock:
            if self.members.get(m.peer_id.identifier) is m:
                del self.members[m.peer_id.identifier]
        m.streams.fail_all(reason)
        self.events.post("state", m.peer_id, conn=conn, state="notConnected", reason=reason)

    def _recover(self, m, episode):
        """Grace period: redial where the peer's last HELLO said it listens,
        until resumed, given up, or the grace passes."""
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and not self.closing.is_set():
            with m.lock:
                if m.episode != episode or m.state != "suspended":
                    return
                can_dial = self.redial and m.listen_ep and m.listen_ep[1] and m.dialing is None
                if can_dial:
                    m.dial_tcp_pending = True
                    m.yield_dial = False
            if can_dial:
                conn = self._resume_dial(m, episode)
                if conn is not None:
                    conn.closed.wait(max(0.0, min(self.handshake_deadline, deadline - time.monotonic())))
                    if m.resumed.is_set():
                        return
            if m.resumed.wait(0.25):
                return
        with m.lock:
            if m.episode != episode or m.state != "suspended":
                return
        self._member_left(m, "grace period passed without a resumption")

    def _resume_dial(self, m, episode):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(m.listen_ep)
        except OSError:
            s.close()
            with m.lock:
                m.dial_tcp_pending = False
            return None
        with m.lock:
            m.dial_tcp_pending = False
            if m.yield_dial or m.episode != episode or m.state != "suspended":
                s.close()               # the peer's resumption came first (§7.9)
                return None
            conn = Connection(self, s, dialer=True, purpose=F.PURPOSE_RESUMPTION, token=m.resumption_id,
                              expected=m.peer_id, member=m)
            m.dialing = conn
        with self.lock:
            self.connections.append(conn)
        self.events.post("resume-dial", m.peer_id, conn=conn)
        conn.start()
        return conn

    def _admit_resumption(self, conn, hello):
        """Listener: HELLO purpose 4 (§7.9). Raises Failed 9 for no such
        member, another peer or another certificate; resolves a race with
        our own dial (or a connection we still hold) by GOODBYE 7."""
        from .connection import Failed
        ident = hello.peer_id.identifier
        with self.lock:
            m = self.members.get(ident)
        fp = fingerprint(conn.peer_chain[0]) if conn.peer_chain else None
        if (m is None or m.state == "left" or m.resumption_id != hello.token or conn.outcome != TLS
                or m.peer_fp != fp):
            raise Failed("unknownToken (resumption)", 9)
        with m.lock:
            ours = m.dialing
            if m.dial_tcp_pending:
                m.yield_dial = True     # our TCP is not up yet: ours yields
            elif ours is not None and not ours.closed.is_set() and ours is not conn:
                if ident > self.peer_id.identifier:
                    ours.superseded = True
                    ours.abort(7, "duplicateConnection (the peer's resumption dial stays)")
                else:
                    raise Failed("duplicateConnection (our resumption dial stays)", 7)
            earlier = m.admitted
            if earlier is not None and earlier is not conn and not earlier.closed.is_set():
                # a later resumption of the peer's replaces an earlier one (§7.9)
                earlier.superseded = True
                earlier.abort(7, "duplicateConnection (a later resumption of the peer's)")
            old = m.conn
            if old is not None and old is not conn and not old.closed.is_set():
                # we had not noticed the loss: the new connection replaces it
                old.superseded = True
                old.abort(7, "duplicateConnection (resumed on a new connection)")
                m.conn = None
            conn.member = m
            m.admitted = conn

    def _resumed(self, conn, peer_delivered):
        """Both proofs checked: the connection carries the member now."""
        m = conn.member
        with m.lock:
            if m.state == "left":
                from .connection import Failed
                raise Failed("member already left", 9)
            if conn.superseded:
                # closed with GOODBYE 7 for another resumption (ours or the peer's)
                # while the peer's RESUME was on its way: it never carries the member.
                # Taken, its end would count as no loss and the member would leave.
                from .connection import Failed
                raise Failed("duplicateConnection (superseded before its RESUME was checked)", 7)
            if m.dialing is conn:
                m.dialing = None
            if m.admitted is conn:
                m.admitted = None
            again = m.resend_to(conn, peer_delivered)    # a bad count raises (GOODBYE 1)
            # §7.9: the establishing connection's exports name and prove the session
            # for as long as it lasts; only where the peer listens comes from here
            m.listen_ep = (conn.peer_addr, conn.peer_hello.listen_port)
            conn.phase = "connected"
            conn.connected = True
            conn.last_rx = time.monotonic()
            conn.book = m.streams
            resumed_streams = self._resume_streams(m, conn)
            episode = m.episode
            m.resumed.set()
        self._register_connected(conn)
        self.events.post("resumed", m.peer_id, conn=conn, resent=again, peer_delivered=peer_delivered,
                         dialer=conn.dialer, streams=resumed_streams)
        t = threading.Timer(self.grace, self._streams_not_resumed, (m, episode))
        t.daemon = True
        t.start()

    # -------------------------------------------- streams across a loss (§7.10)
    def _resume_streams(self, m, conn):
        """Under m.lock, at once after the resumption: STREAM_RESUME for every
        stream we keep, in ordinal order, then the streams the application
        opened meanwhile (STREAM_OPEN). Returns the ordinals resumed."""
        book = m.streams
        frames, ordinals = [], []
        with conn.chan_lock:
            with book.cond:
                skip = self.hooks.get("skip_stream_resume", ())
                for st in sorted(book.outgoing.values(), key=lambda st: st.ordinal):
                    if st.ordinal in skip:
                        continue        # test hook: an opener that does not resume this one
                    ch = conn._open_channel("stream", st.name)
                    frames += resume_frames(st, ch)
                    st.attach(conn, ch, answered=False)
                    st.resumes += 1
                    ordinals.append(st.ordinal)
                for st in list(book.waiting):
                    book.waiting.remove(st)
                    ch = conn._open_channel("stream", st.name)
                    frames.append(book.open(st, conn, ch))
                if frames:
                    conn.enqueue(*frames)
        return ordinals

    def _streams_not_resumed(self, m, episode):
        """A grace period after a resumption: a receiver fails the streams it
        kept that the opener did not resume (§7.10)."""
        with m.lock:
            if m.episode != episode or m.state != "connected":
                return          # lost again (or left): that episode decides
            with m.streams.cond:
                stale = [ins for ins in m.streams.incoming.values() if ins.conn is None or ins.conn is not m.conn]
                for ins in stale:
                    del m.streams.incoming[ins.ordinal]
        for ins in stale:
            ins.fail(reason="not resumed")

    def open_stream(self, peer, name) -> OutStream:
        """Opens a stream to a peer (§7.10 with link recovery): write(),
        close(), reset(), wait(). While the member is suspended the stream
        waits for the resumption."""
        ident = getattr(peer, "identifier", peer)
        m = self.member(ident)
        if m is not None and m.state != "left":
            with m.lock:
                st = OutStream(self, m.streams, m.peer_id, name)
                if m.conn is None:
                    with m.streams.cond:
                        m.streams.waiting.append(st)
                    return st
                m.conn.open_out(st)
                return st
        conn = self.connection_to(ident)
        if conn is None or conn.book is None:
            raise RuntimeError("no connection with link recovery to that peer (use Connection.send_stream)")
        st = OutStream(self, conn.book, conn.peer_id, name)
        conn.open_out(st)
        return st

    def send_stream(self, peer, name, data, timeout=60.0) -> OutStream:
        """open_stream, write, close; returns the stream (wait() for its end)."""
        st = self.open_stream(peer, name)
        if st.write(data, timeout):
            st.close()
        return st

    def incoming_streams(self, peer):
        m = self.member(peer)
        if m is None:
            return {}
        with m.streams.cond:
            return dict(m.streams.incoming)

    def cancel_stream(self, peer, ordinal, code=1):
        """The reader abandons an incoming stream (STREAM_RESET; while the
        member is suspended, at once here and by the answer to its
        STREAM_RESUME there, §7.10). False if it is not being read."""
        m = self.member(peer)
        if m is None:
            return False
        with m.lock:
            conn = m.conn
            with (conn.chan_lock if conn is not None else threading.Lock()):
                with m.streams.cond:
                    ins = m.streams.incoming.pop(ordinal, None)
                    if ins is None:
                        return False
                    if conn is not None and ins.conn is conn and not conn.closed.is_set():
                        n = ins.channel.number
                        conn.channels.pop(n, None)
                        conn.refused[n] = 0
                        conn.enqueue(F.frame(F.STREAM_RESET, code.to_bytes(2, "big"), n))
                    ins.conn = ins.channel = None
        ins.fail(reason="cancelled")
        return True

    # ----------------------------------------- resources across a loss (§7.9)
    def send_resource(self, peer, name, data, transfer_id=None, timeout=60.0, send_id=None):
        """Sends a resource to a peer (§7.8) and returns the outcome as
        Connection.send_resource does. With a member, a transfer whose
        verdict went unread with a lost link is offered again on the
        connection that resumes the session (§7.9), posting
        `resource-offered-again` (`resumed`: whether the offer carries
        RESUMED). RESUMED is set only once the receiver's RESOURCE_ACCEPT for
        this transfer was read on an earlier connection, and then on every
        later offer of it; an offer that went unanswered is offered again
        without it, as a new transfer (the receiver may never have read it,
        and a verdict it remembers for the same content would be an earlier
        transfer's). The receiver keeps no partial here, so it starts where
        the receiver's RESOURCE_ACCEPT says. Each call is a send: it draws a
        random send ID (unless `send_id` is given), which every offer of it on
        a connection with link recovery carries, the ones made again on a
        resumed connection included (§6.4.14, §7.9)."""
        ident = getattr(peer, "identifier", peer)
        tid = transfer_id or R_ID(ident, data)
        sid = new_send_id() if send_id is None else send_id
        deadline = time.monotonic() + timeout
        offered = 0                     # offers made on connections of this member
        accepted = False                # a RESOURCE_ACCEPT for this transfer was read
        while True:
            m = self.member(ident)
            if m is None or m.state == "left":
                if offered:
                    return ("failed", "the member left")
                conn = self.connection_to(ident)
                if conn is None:
                    return ("failed", "not connected")
                return conn.send_resource(name, data, tid, max(0.0, deadline - time.monotonic()), send_id=sid)
            conn = self._carrying(m, deadline)
            if conn is None:
                return ("failed", "the member left" if m.state == "left" else "no resumption in time")
            if offered:
                self.events.post("resource-offered-again", m.peer_id, conn=conn, name=name, times=offered,
                                 resumed=accepted, send_id=sid)
            res, read_accept = conn.offer_resource(name, data, tid, max(0.0, deadline - time.monotonic()),
                                                   resumed=accepted, send_id=sid)
            offered += 1
            accepted = accepted or read_accept
            if res[0] != "failed" or not conn.closed.is_set() or time.monotonic() >= deadline:
                return res
            # the link went before we read the verdict: offer it again once resumed

    def _carrying(self, m, deadline):
        """The live connection carrying member `m`, waiting for a resumption
        until `deadline`; None once it has left or the deadline passes."""
        while time.monotonic() < deadline:
            with m.lock:
                if m.state == "left":
                    return None
                conn = m.conn
                if m.state == "connected" and conn is not None and not conn.closed.is_set():
                    return conn
            time.sleep(0.02)            # m.resumed is still set until the loss is seen
        return None

    # ------------------------------------------------------ datagrams
    def seal_datagram(self, conn, payload: bytes, epoch=None, counter=None) -> bytes:
        """The exact UDP payload for `payload` to `conn`'s peer (next counter
        unless given)."""
        with conn.dgram_lock:
            if epoch is None and counter is None and conn.send_counter >= self.datagrams_per_epoch:
                conn.send_epoch += 1            # next epoch, its counter from 0 (§8)
                conn.send_counter = 0
            e = conn.send_epoch if epoch is None else epoch
            if counter is None:
                counter = conn.send_counter
                conn.send_counter += 1
        rid = conn.peer_hello.datagram_receiver_id
        if conn.outcome == TLS:
            return D.seal(conn.send_key(e), rid, e, counter, payload)
        return D.plain(rid, e, counter, payload)

    def send_datagram(self, conn, payload: bytes):
        self.udp_send_raw(conn, self.seal_datagram(conn, payload))

    def udp_send_raw(self, conn, raw: bytes):
        self.udp.sendto(raw, conn.peer_udp)

    def _udp_loop(self):
        while not self.closing.is_set():
            r, _, _ = select.select([self.udp], [], [], 0.2)
            if not r:
                continue
            try:
                data, addr = self.udp.recvfrom(65535)
            except OSError:
                continue
            self._on_datagram(data, addr)

    def _on_datagram(self, data, addr):
        h = D.DatagramHeader.decode(data)
        if h is None:
            return self.events.post("datagram-dropped", why="malformed")
        with self.lock:
            conn = self.by_rid.get(h.receiver_id)
        if conn is None:
            return self.events.post("datagram-dropped", why="unknown receiver")
        sealed = conn.outcome == TLS
        if (h.kind == D.KIND_SEALED) != sealed:
            return self.events.post("datagram-dropped", conn.peer_id, why="kind")
        if not sealed and addr[0] != conn.peer_addr:
            return self.events.post("datagram-dropped", conn.peer_id, why="source")
        if "udp_drop" in self.hooks and self.hooks["udp_drop"](conn, h):
            return self.events.post("datagram-dropped", conn.peer_id, why="simulated loss", epoch=h.epoch)
        with conn.dgram_lock:
            status, msg = conn.rx.receive(h, data)
        if status == "limit":
            conn.abort(6, "2^32 failed datagram openings in one epoch (§8)")
        if status != "ok":
            return self.events.post("datagram-dropped", conn.peer_id, why=status, epoch=h.epoch)
        self.events.post("datagram", conn.peer_id, conn=conn, payload=msg, epoch=h.epoch, counter=h.counter,
                         source=addr)

    # ---------------------------------------------------------- close
    def close(self):
        self.closing.set()
        with self.lock:
            conns = list(self.connections)
        for c in conns:
            c.disconnect(0)
        for s in (self.listen_sock, self.udp):
            if s is not None:
                s.close()
