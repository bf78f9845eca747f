"""§7.9 per-peer session state that outlives a connection (version 2, TLS):
the resumption ID and key, the pinned certificate, the count of delivered
messages and the ACK schedule, and every sent message kept until counted."""
import collections
import threading
import time

from . import frames as F
from .resources import VerdictBook
from .streams import StreamBook
from .wire import ProtocolViolation, u64

# This peer's ACK schedule, the same figures §7.9 gives for the library.
ACK_MESSAGES = 16
ACK_BYTES = 262144
ACK_DELAY = 0.05


class Member:
    def __init__(self, peer_id):
        self.peer_id = peer_id
        self.lock = threading.RLock()
        self.conn = None                # the connection carrying the member, None while suspended
        self.resumption_id = None
        self.resumption_key = None
        self.peer_fp = None             # fingerprint of the peer's leaf, None without an identity
        self.listen_ep = None           # (host, port) from the peer's last HELLO; port 0: none
        self.state = "connected"        # connected, suspended, left
        self.episode = 0                # counts losses, so a stale recovery thread stops
        self.dialing = None             # our resumption dial of this episode (Connection), if any
        self.admitted = None            # the peer's resumption we admitted, until it carries the member
        self.dial_tcp_pending = False   # our dial's TCP connect is under way
        self.yield_dial = False         # the peer's dial came first: drop ours once TCP is up
        self.resumed = threading.Event()
        self.streams = StreamBook()     # §7.10 ordinals and the streams kept across losses
        self.verdicts = VerdictBook()   # §7.9 verdicts sent on the member's resources
        # sending
        self.sent = 0                   # messages sent in the session
        self.acked = 0                  # highest count an ACK or RESUME gave
        self.kept = collections.deque() # (number, frames) not yet counted by the peer
        # receiving
        self.delivered = 0
        self.pending = 0                # delivered since our last ACK or RESUME
        self.pending_bytes = 0
        self.pending_since = None

    # ------------------------------------------------------------ sending
    def send(self, frames: bytes):
        """Number and keep one message; hand it to the live connection, if
        any. Under the lock, so a resend on resumption stays ahead of it."""
        with self.lock:
            self.sent += 1
            self.kept.append((self.sent, frames))
            if self.conn is not None:
                self.conn.enqueue(frames)

    def on_count(self, count: int, what="ACK"):
        """An ACK's or RESUME's delivered count (§7.9)."""
        with self.lock:
            if count > self.sent or count < self.acked:
                raise ProtocolViolation("%s count %d outside %d..%d" % (what, count, self.acked, self.sent))
            self.acked = count
            while self.kept and self.kept[0][0] <= count:
                self.kept.popleft()

    def resend_to(self, conn, peer_delivered: int):
        """Take `conn` as the member's connection and send again, in order,
        every kept message beyond the peer's count (§7.9)."""
        with self.lock:
            self.on_count(peer_delivered, "RESUME")
            self.conn = conn
            self.state = "connected"
            again = [f for n, f in self.kept if n > peer_delivered]
            if again:
                conn.enqueue(*again)
            return len(again)

    # ---------------------------------------------------------- receiving
    def on_delivered(self, nbytes: int):
        with self.lock:
            self.delivered += 1
            self.pending += 1
            self.pending_bytes += nbytes
            if self.pending_since is None:
                self.pending_since = time.monotonic()

    def ack_due(self, now=None):
        """The ACK frame to send now, or None."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if not self.pending:
                return None
            if (self.pending < ACK_MESSAGES and self.pending_bytes < ACK_BYTES
                    and now - self.pending_since < ACK_DELAY):
                return None
            self.reset_pending()
            return F.frame(F.ACK, u64(self.delivered))

    def ack_wait(self, now=None):
        """Seconds until an ACK falls due (None: nothing pending)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if not self.pending:
                return None
            return max(0.0, ACK_DELAY - (now - self.pending_since))

    def reset_pending(self):
        with self.lock:
            self.pending = 0
            self.pending_bytes = 0
            self.pending_since = None
