"""One MPCP connection (§3-§7): preamble, negotiation, TLS, HELLO, pairing and
trust, then messages, keepalive, goodbye, streams, resources and flow control.

Threads: the connection's own thread runs the handshake and then reads frames;
a writer thread drains an outgoing queue, so the reader never blocks on a
write. Application calls (send_message, open_stream, ...) only enqueue."""
import os
import queue
import socket
import threading
import time

from . import frames as F
from .datagram import LABEL_D2L, LABEL_L2D, EpochReceiver
from .preamble import Preamble, negotiate_version, negotiate_encryption, TLS, PLAINTEXT, REFUSED
from .pairing import commitment, code as pairing_code, EXPORTER_LABEL
from . import resumption as R
from .tls import make_context, peer_chain, fingerprint
from .transport import PlainTransport, TlsTransport, TransportClosed
from .channels import ChannelsMixin, INITIAL_CONNECTION_WINDOW
from .streams import StreamBook
from .wire import ProtocolViolation, u32

class Failed(Exception):
    """Ends a connection: `why` is reported, `goodbye` (if any) is sent."""

    def __init__(self, why, goodbye=None):
        super().__init__(why)
        self.why = why
        self.goodbye = goodbye


class Connection(ChannelsMixin):
    def __init__(self, session, sock: socket.socket, dialer: bool, data=None, purpose=None, token=None,
                 expected=None, member=None):
        self.session = session
        self.member = member              # §7.9 Member: the session this connection carries or resumes
        self.got_goodbye = None           # the peer's GOODBYE reason
        self.resetting = False            # test hook: we reset the TCP connection on purpose
        self.superseded = False           # closed for a newer connection to the same member (GOODBYE 7)
        self.announced = False            # posted state connecting, so its end posts notConnected
        self.dialer_purpose = None        # listener: the purpose of the dialer's HELLO, once read
        self.expected = expected          # PeerID a purpose-3 dial expects to reach
        self.sock = sock
        self.dialer = dialer
        self.data = data                  # ConnectionData when dialing with it
        self.purpose = purpose if purpose is not None else (F.PURPOSE_CONNECTION_DATA if dialer else F.PURPOSE_ANSWER)
        self.token = token or (data.token if data else bytes(16))
        self.peer_addr = sock.getpeername()[0]
        self.transport = None
        self.outcome = None
        self.phase = "preamble"
        self.peer_hello = None
        self.peer_id = data.peer_id if data else expected
        self.peer_chain = []
        self.pairing_code = None
        self.sent_trust = None
        self.got_trust = None
        self.connected = False
        self.closed = threading.Event()
        self.end_reason = None
        self.frames_began = False
        self.outq = queue.Queue()
        self.msg_lock = threading.Lock()
        self.frag = bytearray()
        self.frag_len = 0
        self.last_rx = time.monotonic()
        self.last_ping = 0.0
        self.pings = {}
        # datagrams
        self.my_rid = int.from_bytes(os.urandom(4), "big") or 1
        self.send_epoch = 0
        self.send_counter = 0
        self._rx = None                   # D.EpochReceiver, made at the first datagram
        self.dgram_lock = threading.Lock()
        # channels and flow control
        self.chan_lock = threading.Condition()
        self.channels = {}
        self.refused = {}                 # channels of the peer we reset: bytes discarded
        self.next_channel = 1 if dialer else 2
        self.peer_highest = 0
        self.conn_send_window = INITIAL_CONNECTION_WINDOW
        self.conn_recv_window = INITIAL_CONNECTION_WINDOW
        self.conn_taken = 0
        self.book = None                  # §7.10 StreamBook, on a connection with link recovery
        self.my_nonce = os.urandom(32)
        self.peer_commit = None
        # invitations (§6.4.3, §6.4.4, §7.2)
        self.invitation = None            # inviter: the INVITATION to send; advertiser: the one received
        self.invitation_raw = None        # test hook: an INVITATION payload sent as it is
        self.invitation_response = None   # inviter: the INVITATION_RESPONSE received
        self.answered = threading.Event() # advertiser: INVITATION_RESPONSE sent
        self.answer_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True, name="mpcp-conn")
        self.writer = threading.Thread(target=self._write_loop, daemon=True, name="mpcp-writer")

    # ---------------------------------------------------------------- helpers
    @property
    def log(self):
        return self.session.events

    def start(self):
        self.thread.start()

    def _post(self, kind, **data):
        self.log.post(kind, self.peer_id, conn=self, **data)

    def enqueue(self, *frame_bytes):
        self.outq.put(b"".join(frame_bytes))

    def _write_loop(self):
        while True:
            try:
                item = self.outq.get(timeout=0.5)
            except queue.Empty:
                if self.closed.is_set():
                    return
                try:
                    self.transport.flush(time.monotonic() + 5)   # ciphertext the reader produced
                except TransportClosed:
                    pass
                continue
            if item is None:
                self._close_transport(notify=True)
                return
            try:
                self.transport.send_all(item, deadline=time.monotonic() + 30)
            except TransportClosed:
                # the peer is gone for writing; the reader may still have a
                # GOODBYE to read, so leave closing to it
                self.write_failed = True
                while not self.closed.is_set():
                    try:
                        if self.outq.get(timeout=0.5) is None:
                            break
                    except queue.Empty:
                        pass
                self._close_transport(notify=False)
                return

    def _start_frames(self):
        if not self.frames_began:
            self.frames_began = True
            self.writer.start()

    def _close_transport(self, notify):
        if self.transport is not None:
            self.transport.close(notify=notify)
        else:
            try:
                self.sock.close()
            except OSError:
                pass

    # ------------------------------------------------------------ life cycle
    def _run(self):
        s = self.session
        deadline = time.monotonic() + s.handshake_deadline
        # §7.9: a resumption is no peer state change. A listener cannot tell
        # one until the dialer's HELLO (§4 rule 1: it reports no peer before),
        # so while a member could be resumed it announces at that HELLO.
        if self.purpose != F.PURPOSE_RESUMPTION and (self.dialer or not s.may_be_resumed()):
            self._announce(self.peer_id)
        try:
            self._preambles(deadline)
            self._secure(deadline)
            self._start_frames()
            if "before_hello" in s.hooks:
                s.hooks["before_hello"](self)
            # a version 2 listener answers the dialer's HELLO: after a resumption
            # HELLO it must first admit it (§7.9); see SPEC-GAPS
            if self.dialer or self.version < 2:
                self._send_hello()
            if self.dialer and self.purpose == F.PURPOSE_RESUMPTION:
                self._send_resume(R.ROLE_DIALER)
            if self.dialer and self.purpose in (F.PURPOSE_CONNECTION_DATA, F.PURPOSE_MESH):
                self.enqueue(F.frame(F.PAIRING_COMMIT, commitment(self.my_nonce)))
            if self.dialer and self.purpose == F.PURPOSE_INVITATION:
                # §7.2 step 1: INVITATION at once after HELLO
                payload = self.invitation_raw if self.invitation_raw is not None \
                    else self.invitation.encode_payload()
                self.enqueue(F.frame(F.INVITATION, payload))
            if "after_hello" in s.hooks:
                s.hooks["after_hello"](self)
            self._loop(deadline)
        except Failed as e:
            self._end(e.why, e.goodbye)
        except ProtocolViolation as e:
            self._end("protocolError: %s" % e, e.reason)
        except TransportClosed as e:
            self._end(self.end_reason or "closed: %s" % e, None)
        except Exception as e:  # pragma: no cover - keep the thread from dying silently
            if self.resetting:  # our own reset closed the socket under the reader
                self._end("reset by us", None)
            else:
                self._end("internal: %r" % e, 10)

    def _end(self, why, goodbye):
        if self.closed.is_set():
            return
        self.end_reason = self.end_reason or why
        if self.frames_began and goodbye is not None and self.writer.is_alive():
            self.enqueue(F.frame(F.GOODBYE, goodbye.to_bytes(2, "big")))
        if self.writer.is_alive():
            self.outq.put(None)
            self.writer.join(5)
        else:
            self._close_transport(notify=self.transport is not None and self.transport.tls is not None)
        self.closed.set()
        with self.chan_lock:
            self.chan_lock.notify_all()
        for ch in list(self.channels.values()):
            ch.done.set()
        self._detach_streams()
        if self.member is None and self.book is not None:
            self.book.fail_all("connectionLost")     # no recovery: its streams end with it
        self.session._forget(self)
        if self.member is not None:
            # §7.9: the session decides: lost (resume), left, or nothing (a resumption
            # that never carried the member). GOODBYE 7 on a connection carrying the
            # member means the peer took a resumption instead: a loss too.
            self.session._connection_ended(self, lost=goodbye is None and self.got_goodbye in (None, 7)
                                           and not self.superseded and self.end_reason != "local disconnect")
            return
        if F.PURPOSE_RESUMPTION in (self.purpose, self.dialer_purpose) or not self.announced:
            # refused or failed before it carried a member, or (listener) ended before
            # the dialer's HELLO while a member could be resumed: no peer state (§7.9)
            self._post("resume-ended", reason=self.end_reason, before_hello=self.dialer_purpose is None)
            return
        self._post("state", state="notConnected", reason=self.end_reason)

    def _announce(self, peer):
        self.announced = True
        self.log.post("state", peer, conn=self, state="connecting")

    @property
    def link_recovery(self):
        """§7.10: STREAM_RESUME and STREAM_ACK belong to version 2 TLS connections."""
        return self.version >= 2 and self.outcome == TLS

    @property
    def recovers(self):
        """§7.9: version 2 over TLS carries a session that can outlive the connection."""
        return self.version >= 2 and self.outcome == TLS and self.session.recovery

    def reset(self):
        """Test hook: end the TCP connection with RST (SO_LINGER 0), no GOODBYE, no close_notify."""
        import struct
        self.resetting = True
        self.end_reason = "reset by us"
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass

    def disconnect(self, reason=0):
        """The application's disconnect: GOODBYE then close."""
        if self.closed.is_set():
            return
        self.end_reason = "local disconnect"
        if self.frames_began and self.writer.is_alive():
            self.enqueue(F.frame(F.GOODBYE, reason.to_bytes(2, "big")))
            self.outq.put(None)
        else:
            self._close_transport(notify=False)
        self.closed.wait(5)

    # ------------------------------------------------------------- preambles
    def _preambles(self, deadline):
        s = self.session
        mine = Preamble(s.preference, s.identity is not None, 1, s.max_version)
        if s.hooks.get("preamble"):
            mine_bytes = s.hooks["preamble"]
        else:
            mine_bytes = mine.encode()
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            self.sock.sendall(mine_bytes)
            theirs = b""
            while len(theirs) < 8:
                chunk = self.sock.recv(8 - len(theirs))
                if not chunk:
                    raise Failed("closed during preamble")
                theirs += chunk
        except socket.timeout:
            raise Failed("preamble deadline")
        except OSError as e:
            raise Failed("preamble: %s" % e)
        try:
            peer = Preamble.decode(theirs)
        except ProtocolViolation as e:
            raise Failed("bad preamble: %s" % e)
        mine = Preamble.decode(mine_bytes)
        self.my_preamble, self.peer_preamble = mine, peer
        self.echo = (mine_bytes + theirs) if self.dialer else (theirs + mine_bytes)
        d, l = (mine, peer) if self.dialer else (peer, mine)
        self.version = negotiate_version(d, l)
        if self.version is None:
            raise Failed("version mismatch")
        self.outcome = negotiate_encryption(mine.preference, mine.has_identity,
                                            peer.preference, peer.has_identity)
        self._post("negotiated", outcome=self.outcome)
        if self.outcome == REFUSED:
            if s.hooks.get("observe_refusal"):
                self._observe_after_preamble()
            raise Failed("encryptionIncompatible")
        if self.outcome == PLAINTEXT and self.data is not None and self.data.fingerprint is not None:
            raise Failed("certificateMismatch (plaintext outcome)")

    def _observe_after_preamble(self, timeout=2.0):
        """Test hook: what does the peer send after a refused negotiation?"""
        got, eof = b"", False
        self.sock.settimeout(timeout)
        try:
            while len(got) < 4096:
                chunk = self.sock.recv(4096)
                if not chunk:
                    eof = True
                    break
                got += chunk
        except (socket.timeout, OSError):
            pass
        self._post("after-refusal", bytes=len(got), eof=eof)

    def _secure(self, deadline):
        s = self.session
        if self.outcome == PLAINTEXT:
            self.transport = PlainTransport(self.sock)
            return
        if s.hooks.get("tickets") and self.dialer:
            # test hook: one client context that keeps sessions, to try resumption
            if "ticket_ctx" not in s.hooks:
                s.hooks["ticket_ctx"] = make_context(server=False, identity=s.identity, tickets=True)
            ctx = s.hooks["ticket_ctx"]
        else:
            ctx = make_context(server=not self.dialer, identity=s.identity)
        if "tls" in s.hooks:
            s.hooks["tls"](ctx, not self.dialer)
        self.transport = TlsTransport(self.sock, ctx, server=not self.dialer)
        if "tls_conn" in s.hooks:
            s.hooks["tls_conn"](self.transport.tls)
        try:
            self.transport.handshake(deadline)
        except TransportClosed as e:
            raise Failed("tls handshake failed: %s" % e)
        tls = self.transport.tls
        if tls.get_alpn_proto_negotiated() != b"mpcp/1":
            # client: the server did not select it; server: the client did not offer it
            raise Failed("ALPN mpcp/1 not negotiated")
        chain = peer_chain(tls)
        if self.dialer:
            if self.data is not None and self.data.fingerprint is not None:
                if not chain or fingerprint(chain[0]) != self.data.fingerprint:
                    raise Failed("certificateMismatch")
            if self.purpose == F.PURPOSE_RESUMPTION and self.member.peer_fp is not None:
                # §7.9: the listener must show the leaf the member had (closed as in §9.3)
                if not chain or fingerprint(chain[0]) != self.member.peer_fp:
                    raise Failed("certificateMismatch (resumption)")
            # A server without identity presents an ephemeral certificate: ignored.
            self.peer_chain = chain if self.peer_preamble.has_identity else []
        else:
            self.peer_chain = chain
        self._start_frames()
        if self.peer_preamble.has_identity and not chain:
            raise Failed("downgrade: identity flag without certificate", 4)
        if not self.dialer and not self.peer_preamble.has_identity and chain:
            raise Failed("downgrade: certificate without identity flag", 4)

    def _send_hello(self):
        s = self.session
        # an invitation connection (§7.2) carries no session traffic: its HELLOs
        # announce no listening or datagram port (as the library's do; SPEC-GAPS 19)
        invitation = self.purpose == F.PURPOSE_INVITATION or getattr(s, "advertiser", None) is not None
        hello = F.Hello(self.version, self.purpose, self.echo,
                        self.token if self.purpose in (1, 3, 4) else bytes(16),
                        0 if invitation else s.listen_port, 0 if invitation or not s.udp_port else s.udp_port,
                        0 if invitation or not s.udp_port else self.my_rid, s.peer_id)
        if "hello" in s.hooks:
            hello = s.hooks["hello"](hello) or hello
        self.enqueue(F.frame(F.HELLO, hello.encode_payload()))

    # ----------------------------------------------------------- frame loop
    def _send_resume(self, role):
        """§6.4.7a: our proof over the new connection's binding, and our count."""
        m = self.member
        with m.lock:
            proof = R.proof(m.resumption_key, role, R.binding(self.transport))
            if "resume_proof" in self.session.hooks:
                proof = self.session.hooks["resume_proof"](proof)
            self.enqueue(F.frame(F.RESUME, F.Resume(proof, m.delivered).encode_payload()))
            m.reset_pending()

    def _on_resume(self, r):
        m = self.member
        if "before_resume_check" in self.session.hooks:
            # test hook: e.g. the link goes after the peer checked our RESUME, before we check its
            self.session.hooks.pop("before_resume_check")(self)
        role = R.ROLE_LISTENER if self.dialer else R.ROLE_DIALER
        if not R.check(m.resumption_key, role, R.binding(self.transport), r.proof):
            # §7.9: a listener answers GOODBYE 9; a dialer closes with GOODBYE 1 and
            # may dial again (what answered at the old address may not be the peer)
            raise Failed("wrong resumption proof", 1 if self.dialer else 9)
        self.session._resumed(self, r.delivered)

    def _loop(self, deadline):
        parser = F.FrameParser(self.version, recovery=self.outcome == TLS)
        s = self.session
        while not self.closed.is_set():
            now = time.monotonic()
            if not self.connected and now > deadline and self.phase in ("hello", "pairing", "invitation", "resume"):
                raise Failed("handshake deadline", 6)
            if self.phase == "invitation-wait" and now > deadline + self.invitation.timeout_ms / 1000.0:
                raise Failed("no INVITATION_RESPONSE within the timeout", 6)
            if not self.connected and self.phase == "trust" and now > deadline + s.trust_timeout:
                raise Failed("trust deadline", 6)
            if self.connected:
                idle = now - self.last_rx
                if idle > s.dead_peer:
                    # §7.7: on a recovering connection the link is lost, not ended
                    raise Failed("dead peer", None if self.recovers else 6)
                if s.keepalive and idle > s.keepalive and now - self.last_ping > s.keepalive:
                    self.send_ping()
            wait = 0.2
            if self.connected and self.member is not None:
                ack = self.member.ack_due(now)
                if ack is not None and not s.hooks.get("no_ack"):
                    self.enqueue(ack)
                left = self.member.ack_wait()
                if left is not None:
                    wait = min(wait, max(0.005, left))
            try:
                data = self.transport.recv(wait)
            except TransportClosed as e:
                raise TransportClosed(self.end_reason or str(e))
            if not data:
                self._flush_window_updates()
                continue
            self.last_rx = time.monotonic()
            for fr in parser.feed(data):
                self._handle(fr)
                if self.closed.is_set():
                    return
            self._flush_window_updates()

    def _handle(self, fr: F.Frame):
        t = fr.type
        if t == F.GOODBYE:
            name = F.GOODBYE_REASONS[fr.value] if fr.value < len(F.GOODBYE_REASONS) else "other"
            self._post("goodbye", reason=fr.value, name=name)
            self.got_goodbye = fr.value
            self.end_reason = "goodbye %d %s" % (fr.value, name)
            raise TransportClosed(self.end_reason)
        if self.phase == "preamble":
            self.phase = "hello"
        if self.phase == "hello":
            if t != F.HELLO:
                raise ProtocolViolation("%s before HELLO" % fr.name)
            return self._on_hello(fr.value)
        if t == F.PING:
            if not self.session.hooks.get("mute"):
                self.enqueue(F.frame(F.PONG, fr.value))
            self._post("ping", opaque=fr.value)
            return
        if t == F.PONG:
            self._post("pong", opaque=fr.value, rtt=time.monotonic() - self.pings.pop(fr.value, time.monotonic()))
            return
        if self.phase in ("invitation", "invitation-wait", "invitation-answer"):
            return self._on_invitation_phase(fr)
        if self.phase == "resume":
            # §7.1: a resumption connection takes RESUME once after HELLO
            if t != F.RESUME:
                raise ProtocolViolation("%s before RESUME" % fr.name)
            return self._on_resume(fr.value)
        if self.phase == "pairing":
            return self._on_pairing(fr)
        if self.phase == "trust":
            if t != F.TRUST:
                raise ProtocolViolation("%s during trust" % fr.name)
            return self._on_trust(fr.value)
        if self.phase == "connected":
            return self._on_connected(fr)
        raise ProtocolViolation("%s in phase %s" % (fr.name, self.phase))

    def _on_hello(self, h: F.Hello):
        s = self.session
        if not self.dialer:
            self.dialer_purpose = h.purpose
            if not self.announced and h.purpose != F.PURPOSE_RESUMPTION:
                self._announce(h.peer_id)       # not a resumption: a peer state from now on
        if h.version != self.version:
            raise ProtocolViolation("HELLO version")
        if self.dialer and h.purpose != F.PURPOSE_ANSWER:
            raise ProtocolViolation("listener HELLO purpose")
        if not self.dialer and h.purpose == F.PURPOSE_ANSWER:
            raise ProtocolViolation("dialer HELLO purpose 0")
        if h.preamble_echo != self.echo:
            if not self.dialer and self.version >= 2:
                self._send_hello()
            raise Failed("downgradeDetected (preamble echo)", 4)
        self.peer_hello = h
        if self.dialer and self.purpose == F.PURPOSE_RESUMPTION:
            if h.peer_id.identifier != self.member.peer_id.identifier:
                raise Failed("unexpectedPeer (resumption)", 1)
            self.peer_id = h.peer_id
            self._post("hello", hello=h)
            self.phase = "resume"
            return
        if not self.dialer and h.purpose == F.PURPOSE_RESUMPTION:
            self.peer_id = h.peer_id
            self.session._admit_resumption(self, h)    # raises Failed(..., 9 or 7)
            self._send_hello()
            self._send_resume(R.ROLE_LISTENER)
            self._post("hello", hello=h)
            self.phase = "resume"
            return
        if not self.dialer and self.version >= 2:
            self._send_hello()
        if self.dialer:
            want = self.data.peer_id if self.data is not None else self.expected
            if want is not None and h.peer_id.identifier != want.identifier:
                self.peer_id = h.peer_id
                raise Failed("unexpectedPeer", 1)
            self.peer_id = h.peer_id
            if self.purpose == F.PURPOSE_INVITATION:
                self._post("hello", hello=h)
                self.phase = "invitation-wait"
                return
        else:
            self.peer_id = h.peer_id
            if h.peer_id.identifier == s.peer_id.identifier:
                raise ProtocolViolation("equal peer identifiers")
            if h.purpose == F.PURPOSE_INVITATION and getattr(s, "advertiser", None) is not None:
                self._post("hello", hello=h)
                self.phase = "invitation"        # INVITATION next (§7.1)
                return
            if h.purpose == F.PURPOSE_CONNECTION_DATA:
                if not s.redeem_token(h.token, h.peer_id.identifier):
                    raise Failed("unknownToken", 9)
            elif h.purpose == F.PURPOSE_MESH:
                if not s.admit_introduced(h.token, h.peer_id.identifier):
                    raise Failed("unknownToken (introduction)", 9)
            elif h.purpose == F.PURPOSE_INVITATION:
                raise Failed("invitations not supported by this peer", 10)
            self._resolve_duplicates(h.peer_id.identifier)
        self._post("hello", hello=h)
        self.phase = "pairing"

    # ----------------------------------------------------------- invitations
    def _on_invitation_phase(self, fr):
        """§7.1: advertiser: INVITATION once, then only GOODBYE, PING, PONG;
        inviter: INVITATION_RESPONSE once (PING/PONG/GOODBYE handled before)."""
        if not self.dialer and self.phase == "invitation" and fr.type == F.INVITATION:
            self.invitation = fr.value
            self.phase = "invitation-answer"
            self.session.advertiser.on_invitation(self, fr.value)
            return
        if self.dialer and self.phase == "invitation-wait" and fr.type == F.INVITATION_RESPONSE:
            self.invitation_response = fr.value
            self._post("invitation-response", response=fr.value.response, data=fr.value.connection_data)
            self.phase = "invitation-done"
            # §7.2: the advertiser closes after answering; so do we
            self.end_reason = "invitation answered %d" % fr.value.response
            raise TransportClosed(self.end_reason)
        raise ProtocolViolation("%s on an invitation connection (%s)" % (fr.name, self.phase))

    def answer_invitation(self, response, connection_data=None) -> bool:
        """Advertiser: send INVITATION_RESPONSE once, then close (§7.2 step 3)."""
        with self.answer_lock:
            if self.answered.is_set() or self.closed.is_set():
                return False
            self.answered.set()
        self.enqueue(F.frame(F.INVITATION_RESPONSE,
                             F.InvitationResponse(response, connection_data).encode_payload()))
        self.end_reason = "invitation answered %d" % response
        self.outq.put(None)
        self._post("invitation-answered", response=response)
        return True

    def _resolve_duplicates(self, ident):
        """§7.5, applied by a listener that has just read a dialer's HELLO."""
        s = self.session
        others = s.other_connections(ident, self)
        if any(o.connected for o in others):
            raise Failed("duplicateConnection (already connected)", 7)
        for o in others:
            if o.dialer and ident > s.peer_id.identifier:
                o.abort(7, "duplicateConnection (superseded by the peer's dial)")
            else:
                raise Failed("duplicateConnection", 7)

    def abort(self, goodbye, why):
        """End this connection from another thread, in whatever phase."""
        self.end_reason = why
        if self.frames_began and self.writer.is_alive():
            self.enqueue(F.frame(F.GOODBYE, goodbye.to_bytes(2, "big")))
            self.outq.put(None)
        else:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _exported_pairing_key(self):
        if self.outcome == TLS:
            return self.transport.export(EXPORTER_LABEL, 32, b"")
        return b""

    def _on_pairing(self, fr):
        if fr.type == F.PAIRING_COMMIT and not self.dialer and self.peer_commit is None:
            self.peer_commit = fr.value
            self.enqueue(F.frame(F.PAIRING_NONCE, self.my_nonce))
            return
        if fr.type == F.PAIRING_NONCE:
            if self.dialer:
                nd, nl, commit = self.my_nonce, fr.value, commitment(self.my_nonce)
                sent = self.session.hooks.get("bad_nonce") and os.urandom(32) or self.my_nonce
                self.enqueue(F.frame(F.PAIRING_NONCE, sent))
                did, lid = self.session.peer_id.identifier, self.peer_id.identifier
            else:
                if self.peer_commit is None:
                    raise ProtocolViolation("PAIRING_NONCE before PAIRING_COMMIT")
                if commitment(fr.value) != self.peer_commit:
                    raise ProtocolViolation("pairing nonce does not match commitment")
                nd, nl, commit = fr.value, self.my_nonce, self.peer_commit
                did, lid = self.peer_id.identifier, self.session.peer_id.identifier
            self.pairing_code = pairing_code(self._exported_pairing_key(), did, lid, commit, nd, nl)
            self.phase = "trust"
            self._decide_trust()
            return
        raise ProtocolViolation("%s during pairing" % fr.name)

    def _decide_trust(self):
        accepted = self.session.trust_decision(self, self.peer_chain, self.pairing_code)
        self._post("trust", accepted=accepted, chain=self.peer_chain, code=self.pairing_code)
        self.sent_trust = F.TRUST_ACCEPTED if accepted else F.TRUST_REJECTED
        self.enqueue(F.frame(F.TRUST, bytes([self.sent_trust])))
        if not accepted:
            raise Failed("trust rejected by us", None)
        self._maybe_connected()

    def _on_trust(self, value):
        self.got_trust = value
        if value != F.TRUST_ACCEPTED:
            self.end_reason = "peer trust %s" % {2: "rejected", 3: "timedOut"}[value]
            raise TransportClosed(self.end_reason)
        self._maybe_connected()

    def _maybe_connected(self):
        if self.sent_trust == F.TRUST_ACCEPTED and self.got_trust == F.TRUST_ACCEPTED:
            self.phase = "connected"
            self.connected = True
            self.last_rx = time.monotonic()
            if self.recovers:
                self.session._establish(self)
            if self.link_recovery:
                # §7.10: acknowledged streams; kept across losses only with a member
                self.book = self.member.streams if self.member is not None else StreamBook()
            self.session._register_connected(self)
            self._post("state", state="connected")

    # --------------------------------------------------------- connected
    def _on_connected(self, fr):
        t = fr.type
        if t in (F.HELLO, F.TRUST, F.INVITATION, F.INVITATION_RESPONSE, F.PAIRING_COMMIT, F.PAIRING_NONCE,
                 F.RESUME):
            raise ProtocolViolation("%s after connected" % fr.name)
        if t == F.ACK:
            if self.member is None:
                # version 2 without TLS (or with our recovery off): nothing is kept; see SPEC-GAPS
                self._post("ack", delivered=fr.value)
                return
            self.member.on_count(fr.value)
            self._post("ack", delivered=fr.value)
            return
        if t == F.MESSAGE:
            self.frag_len += len(fr.value)
            if self.frag_len > F.MAX_MESSAGE:
                raise ProtocolViolation("message over 16 MiB", 2)
            self.frag += fr.value
            if fr.flags & F.FLAG_END:
                msg = bytes(self.frag)
                self.frag = bytearray()
                self.frag_len = 0
                if self.member is not None:
                    self.member.on_delivered(len(msg))
                self._post("message", payload=msg)
            return
        if t == F.MESH_INTRODUCTION:
            self._post("mesh", entries=fr.value.entries)
            self.session.on_introduction(self, fr.value.entries)
            return
        if t == F.WINDOW_UPDATE:
            return self._on_window_update(fr.channel, fr.value)
        return self._on_channel_frame(fr)

    # ----------------------------------------------------- application API
    def send_message(self, payload: bytes, fragment=65536):
        if not self.connected:
            raise RuntimeError("not connected")
        if len(payload) > F.MAX_MESSAGE:
            raise ValueError("message too large")
        pieces = [payload[i:i + fragment] for i in range(0, len(payload), fragment)] or [b""]
        out = [F.frame(F.MESSAGE, p, flags=F.FLAG_END if i == len(pieces) - 1 else 0)
               for i, p in enumerate(pieces)]
        if self.member is not None:
            self.member.send(b"".join(out))    # kept until counted (§7.9)
            return
        with self.msg_lock:
            self.enqueue(*out)

    def send_ping(self):
        opaque = os.urandom(8)
        self.pings[opaque] = time.monotonic()
        self.last_ping = time.monotonic()
        self.enqueue(F.frame(F.PING, opaque))
        return opaque

    def send_raw(self, data: bytes):
        """Test hook: put arbitrary bytes on the secured channel."""
        self.enqueue(data)

    # -------------------------------------------------------- datagrams
    def _key(self, label, epoch):
        return self.transport.export(label, 32, u32(epoch))

    def send_key(self, epoch=None):
        return self._key(LABEL_D2L if self.dialer else LABEL_L2D, self.send_epoch if epoch is None else epoch)

    def recv_key(self, epoch):
        return self._key(LABEL_L2D if self.dialer else LABEL_D2L, epoch)

    @property
    def rx(self):
        """The receiving side of §8 rules 2-4 (sealed: keys from §5.1)."""
        if self._rx is None:
            self._rx = EpochReceiver(self.recv_key if self.outcome == TLS else None)
        return self._rx

    @property
    def recv_epoch(self):
        return self.rx.epoch

    @property
    def recv_keys(self):
        """Epochs whose key is held as current or previous (§8 rule 2)."""
        return self.rx.held_epochs()

    @property
    def peer_udp(self):
        return (self.peer_addr, self.peer_hello.datagram_port)
