"""§7.2 invitations: the advertiser's invitation listener and the inviter's
dial (HELLO purpose 2, INVITATION, INVITATION_RESPONSE)."""
import socket
import threading
import time

from . import frames as F
from .connection import Connection
from .preamble import negotiate_encryption, REFUSED
from .session import Session

ACCEPTED, DECLINED, TIMED_OUT, SESSION_FULL, ENCRYPTION_INCOMPATIBLE = 1, 2, 3, 4, 5
RESPONSE_NAMES = {1: "accepted", 2: "declined", 3: "timedOut", 4: "sessionFull", 5: "encryptionIncompatible"}
MAX_MEMBERS = 8


class InvitationListener:
    """The advertiser's listener (§7.2 step 2): it has no session yet, so it
    speaks with preference `optional` and no identity (an ephemeral
    certificate), answers HELLO purpose 0 with the advertised peer's ID, and
    hands each INVITATION to the application, which has the INVITATION's
    timeout to answer (`answer`); without an answer it sends 3 (timedOut).

    `session` is the session an acceptance joins (its connection data goes
    into INVITATION_RESPONSE 1). `decide(conn, invitation)` may answer at
    once (returning "accept", "decline" or a response number) or return None
    to leave the invitation pending; pending ones are posted as
    "invitation" events on `events`."""

    def __init__(self, session: Session, decide=None, handshake_deadline=10.0):
        self.session = session
        self.decide = decide
        self.endpoint = Session(session.peer_id.display_name, "optional", identity=None, datagrams=False,
                                listen=True, handshake_deadline=handshake_deadline, keepalive=0)
        self.endpoint.peer_id = session.peer_id        # HELLO carries the advertised peer's ID
        self.endpoint.advertiser = self
        self.endpoint.mesh = False
        self.events = self.endpoint.events
        self.port = self.endpoint.listen_port
        self.count = 0
        self.silent = False        # test hook: never answer, not even 3 when the timeout passes
        self.lock = threading.Lock()

    def on_invitation(self, conn, inv):
        with self.lock:
            self.count += 1
            n = self.count
        conn.invitation_number = n
        conn.log.post("invitation", conn.peer_id, conn=conn, n=n, context=inv.context, timeout_ms=inv.timeout_ms)
        if self.silent:
            return
        threading.Thread(target=self._timer, args=(conn, inv.timeout_ms / 1000.0), daemon=True).start()
        if self.decide is not None:
            answer = self.decide(conn, inv)
            if answer is not None:
                self.answer(conn, answer)

    def _timer(self, conn, timeout):
        if not conn.answered.wait(timeout) and not conn.closed.is_set():
            conn.answer_invitation(TIMED_OUT)

    def answer(self, conn, answer) -> int:
        """"accept": 1 with connection data from `session` for the inviter, or
        5 when the inviter's preamble and the session's preference are
        refused (§4), or 4 when the session is full; "decline": 2; a number:
        sent as it is. Returns the response sent (None if already answered)."""
        s = self.session
        if answer == "accept":
            pre = conn.peer_preamble
            if negotiate_encryption(s.preference, s.identity is not None,
                                    pre.preference, pre.has_identity) == REFUSED:
                response = ENCRYPTION_INCOMPATIBLE
            elif len({c.peer_id.identifier for c in list(s.connections) if c.connected}) + 1 >= MAX_MEMBERS:
                response = SESSION_FULL
            else:
                data = s.make_connection_data(conn.peer_id)
                return ACCEPTED if conn.answer_invitation(ACCEPTED, data) else None
        elif answer == "decline":
            response = DECLINED
        else:
            response = int(answer)
        if response == ACCEPTED:
            raise ValueError("accept with \"accept\" so that connection data is made")
        return response if conn.answer_invitation(response) else None

    def close(self):
        self.endpoint.close()


def invite(session: Session, endpoints, peer_id, context=b"", timeout=30.0, raw_invitation=None,
           connect_timeout=3.0):
    """The inviter (§7.2 steps 1 and 4): dial the first endpoint that answers
    ((host, port) pairs) with HELLO purpose 2 and INVITATION, wait for
    INVITATION_RESPONSE at most the timeout plus the handshake deadline.
    Returns (response number or None, the invitation Connection, why)."""
    conn = None
    for host, port in endpoints:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(connect_timeout)
        try:
            s.connect((host, port))
        except OSError:
            s.close()
            continue
        conn = Connection(session, s, dialer=True, purpose=F.PURPOSE_INVITATION, expected=peer_id)
        conn.invitation = F.Invitation(max(1, min(3_600_000, int(timeout * 1000))), context)
        conn.invitation_raw = raw_invitation
        with session.lock:
            session.connections.append(conn)
        conn.start()
        break
    if conn is None:
        return None, None, "unreachable"
    conn.closed.wait(timeout + session.handshake_deadline + 2)
    if conn.invitation_response is None:
        return None, conn, conn.end_reason or "no answer"
    return conn.invitation_response.response, conn, None


def invite_and_connect(session: Session, endpoints, peer_id, context=b"", timeout=30.0, connect_wait=8.0):
    """Invite, and on acceptance dial the accepting session with the returned
    connection data (HELLO purpose 1). Returns (response, session Connection
    or None, why)."""
    response, conn, why = invite(session, endpoints, peer_id, context, timeout)
    if response != ACCEPTED:
        return response, None, why or RESPONSE_NAMES.get(response)
    mark = session.events.mark()
    sc = session.connect(conn.invitation_response.connection_data)
    ev = session.events.wait(lambda e: e.kind == "state" and e.data.get("conn") is sc
                             and e.data["state"] != "connecting", connect_wait, since=mark)
    if ev is None or ev.data["state"] != "connected":
        return response, sc, "connectionFailed: %s" % (ev.data.get("reason") if ev else "no outcome")
    return response, sc, None
