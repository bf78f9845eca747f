"""§7.10 streams across a lost link (version 2, link recovery): the part of a
stream that outlives its connection. The opener's OutStream keeps every byte
until a STREAM_ACK counts it and stops at 1,048,576 unacknowledged; the
receiver's InStream counts what it received in the session and acknowledges
every 262,144 bytes and, with CLOSED, at the end. A StreamBook holds one
session's ordinals and kept streams: a Member's, or a connection's own when
the session does not recover.

Lock order: Member.lock, then a connection's chan_lock, then StreamBook.cond."""
import hashlib
import threading
import time

from . import frames as F
from .wire import ProtocolViolation, u64, string8

ACK_EVERY = 262_144            # a receiver acknowledges at least this often (§7.10)
HOLD = 1_048_576               # an opener stops at this many unacknowledged bytes (§7.10)
WRITE_BUFFER = 2 * HOLD        # an application's write waits beyond this many unacknowledged bytes
FRAME_DATA = 65_524            # a full STREAM_DATA frame with its header is 65,536 bytes (§7.6)


class StreamBook:
    def __init__(self):
        self.cond = threading.Condition(threading.RLock())
        self.opened = 0            # streams we opened in the session: the next ordinal
        self.peer_opened = 0       # the peer's streams we counted, refused ones included
        self.outgoing = {}         # ordinal -> OutStream we keep
        self.waiting = []          # OutStreams the application opened while suspended
        self.incoming = {}         # ordinal -> InStream still being read

    def open(self, st, conn, ch):
        """Opens OutStream `st` on `conn`'s channel `ch`: the session's next
        ordinal, kept here until acknowledged. Returns its STREAM_OPEN
        (§7.10). The caller holds conn.chan_lock and self.cond."""
        st.ordinal = self.opened
        self.opened += 1
        self.outgoing[st.ordinal] = st
        st.attach(conn, ch, answered=True)
        return open_frame(st, ch)

    def fail_all(self, reason):
        """The member left (or a connection without recovery ended): every
        stream fails on both sides (§7.10)."""
        with self.cond:
            outs = list(self.outgoing.values()) + list(self.waiting)
            ins = list(self.incoming.values())
            self.outgoing.clear()
            self.waiting.clear()
            self.incoming.clear()
        for st in outs:
            st.finish(("lost", reason))
        for ins_ in ins:
            ins_.fail(reason=reason)


class InStream:
    """A stream the peer opened, as its receiver reads it."""

    def __init__(self, session, peer_id, ordinal, name):
        self.session, self.peer_id = session, peer_id
        self.ordinal, self.name = ordinal, name
        self.received = 0          # bytes of the stream received in the session
        self.since_ack = 0         # since our last STREAM_ACK or the frame that opened it here
        self.hash = hashlib.sha256()
        self.data = bytearray()
        self.conn = None           # the connection and channel carrying it now (None: detached)
        self.channel = None
        self.state = "reading"     # reading, ended

    def take(self, payload, keep):
        self.received += len(payload)
        self.since_ack += len(payload)
        self.hash.update(payload)
        if keep:
            self.data += payload

    def ack_due(self):
        """A STREAM_ACK frame to send now (every ACK_EVERY bytes), or None."""
        if self.since_ack < ACK_EVERY or self.channel is None:
            return None
        self.since_ack = 0
        return F.frame(F.STREAM_ACK, u64(self.received), self.channel.number)

    def fail(self, code=None, reason=None):
        if self.state == "ended":
            return
        self.state = "ended"
        self.session.events.post("stream-failed", self.peer_id, name=self.name, ordinal=self.ordinal,
                                 code=code, reason=reason, received=self.received)


class OutStream:
    """A stream this side opened: the application writes, a pump thread sends
    within the windows and the 1 MiB hold, and the stream is kept until the
    receiver's STREAM_ACK with CLOSED or a STREAM_RESET."""

    def __init__(self, session, book, peer_id, name):
        self.session, self.book, self.peer_id, self.name = session, book, peer_id, name
        self.cond = book.cond
        self.ordinal = None
        self.buf = bytearray()     # bytes from `acked` to `written`
        self.written = 0           # bytes the application wrote
        self.sent = 0              # where the next STREAM_DATA on the current channel starts
        self.sent_max = 0          # bytes sent in the session
        self.acked = 0             # highest STREAM_ACK count
        self.closing = False       # the application closed the stream
        self.reset_code = None     # the application reset the stream
        self.close_sent = False    # STREAM_CLOSE sent in the session
        self.conn = None
        self.ch = None
        self.gen = 0               # bumps at each attach, so a stale pump step is dropped
        self.held = False          # the pump waits at HOLD unacknowledged bytes
        self.outcome = None        # ("closed", length), ("cancelled", None), ("reset", code), ("lost", why)
        self.done = threading.Event()
        self.resumes = 0           # STREAM_RESUMEs sent for it
        threading.Thread(target=self._pump, daemon=True, name="mpcp-stream").start()

    # ------------------------------------------------------ application side
    def write(self, data, timeout=60.0) -> bool:
        """Append to the stream; waits while WRITE_BUFFER bytes are
        unacknowledged (also while the member is suspended)."""
        deadline = time.monotonic() + timeout
        view = memoryview(bytes(data))
        with self.cond:
            while view:
                if self.done.is_set() or self.closing or self.reset_code is not None:
                    return False
                room = WRITE_BUFFER - (self.written - self.acked)
                if room <= 0:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(min(left, 0.2))
                    continue
                n = min(room, len(view))
                self.buf += view[:n]
                self.written += n
                view = view[n:]
                self.cond.notify_all()
        return True

    def close(self):
        with self.cond:
            self.closing = True
            self.cond.notify_all()

    def reset(self, code=1):
        """The application abandons the stream (STREAM_RESET)."""
        with self.cond:
            if self.done.is_set() or self.reset_code is not None:
                return
            self.reset_code = code
            if self.ordinal is None:        # never opened on the wire
                self._finish_locked(("cancelled", None))
            self.cond.notify_all()

    def wait(self, timeout):
        """The outcome once the stream is over, else None."""
        self.done.wait(timeout)
        return self.outcome

    def wait_close_sent(self, timeout) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self.close_sent and not self.done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.2))
            return self.close_sent and self.outcome in (None, ("closed", self.written))

    @property
    def unacked(self):
        return self.sent_max - self.acked

    # ------------------------------------------------------ connection side
    def attach(self, conn, ch, answered):
        """Under book.cond: the stream goes on on `ch` (a new channel)."""
        self.conn, self.ch = conn, ch
        ch.out = self
        ch.awaiting = not answered
        self.gen += 1
        self.cond.notify_all()

    def detach(self, conn):
        with self.cond:
            if self.conn is conn:
                self.conn, self.ch = None, None
                self.gen += 1
                self.cond.notify_all()

    def on_ack(self, ch, count, closed):
        """Under the connection's chan_lock: a STREAM_ACK on `ch` (§7.10).
        True when it ends the stream."""
        with self.cond:
            if count < self.acked or count > self.sent_max:
                raise ProtocolViolation("STREAM_ACK count %d outside %d..%d" % (count, self.acked, self.sent_max))
            if closed:
                if not (ch.close_sent or ch.reset_sent):
                    raise ProtocolViolation("STREAM_ACK CLOSED before STREAM_CLOSE or STREAM_RESET")
                if ch.close_sent and not ch.reset_sent and count != self.written:
                    raise ProtocolViolation("STREAM_ACK CLOSED count %d, the stream has %d" % (count, self.written))
            del self.buf[:count - self.acked]
            self.acked = count
            if ch.awaiting:
                ch.awaiting = False
                self.sent = count          # send on from the receiver's count
            self.cond.notify_all()
            if closed:
                self._finish_locked(("cancelled", None) if ch.reset_sent else ("closed", self.written))
                return True
            return False

    def on_reset(self, ch, code):
        """Under the connection's chan_lock: the receiver's STREAM_RESET on `ch`."""
        with self.cond:
            if ch.awaiting and code == 1 and (self.close_sent or self.reset_code is not None):
                # the answer to STREAM_RESUME: the stream had ended at the receiver,
                # and we had ended it: over (§7.10). Any other code (3: a stream new
                # to the receiver, refused) is the receiver's reset as on any connection.
                self._finish_locked(("cancelled", None) if self.reset_code is not None
                                    else ("closed", self.written))
            elif self.reset_code is not None and ch.reset_sent:
                self._finish_locked(("cancelled", None))
            else:
                self._finish_locked(("reset", code))

    def finish(self, outcome):
        with self.cond:
            self._finish_locked(outcome)

    def _finish_locked(self, outcome):
        if self.done.is_set():
            return
        self.outcome = outcome
        self.book.outgoing.pop(self.ordinal, None)
        if self in self.book.waiting:
            self.book.waiting.remove(self)
        self.buf = bytearray()
        self.done.set()
        self.cond.notify_all()
        self.session.events.post("stream-sent", self.peer_id, name=self.name, ordinal=self.ordinal,
                                 outcome=outcome, length=self.written, resumes=self.resumes)

    # ------------------------------------------------------------- sending
    def _job(self):
        """Under book.cond: what the pump can do now, or None."""
        c, ch = self.conn, self.ch
        if c is None or ch is None or c.closed.is_set() or ch.awaiting:
            return None
        if self.reset_code is not None:
            return None if ch.reset_sent else "reset"
        if self.sent < self.written:
            self.held = self.acked + HOLD - self.sent <= 0
            return None if self.held else "data"
        if self.closing and not ch.close_sent:
            return "close"
        return None

    def _pump(self):
        while True:
            with self.cond:
                while True:
                    if self.done.is_set() or self.session.closing.is_set():
                        return
                    job = self._job()
                    if job is not None:
                        break
                    self.cond.wait(0.2)
                conn, ch, gen = self.conn, self.ch, self.gen
            with conn.chan_lock:
                if job == "data" and (ch.send_window <= 0 or conn.conn_send_window <= 0):
                    conn.chan_lock.wait(0.1)
                    continue
                with self.cond:
                    if self.gen != gen or self._job() != job:
                        continue
                    if job == "data":
                        n = min(self.written - self.sent, FRAME_DATA, ch.send_window, conn.conn_send_window,
                                self.acked + HOLD - self.sent)
                        start = self.sent - self.acked
                        payload = bytes(self.buf[start:start + n])
                        ch.send_window -= n
                        conn.conn_send_window -= n
                        self.sent += n
                        self.sent_max = max(self.sent_max, self.sent)
                        conn.enqueue(F.frame(F.STREAM_DATA, payload, ch.number))
                    elif job == "close":
                        ch.close_sent = True
                        self.close_sent = True
                        conn.enqueue(F.frame(F.STREAM_CLOSE, b"", ch.number))
                    else:
                        ch.reset_sent = True
                        conn.enqueue(F.frame(F.STREAM_RESET, self.reset_code.to_bytes(2, "big"), ch.number))
                    self.cond.notify_all()


def resume_frames(st, ch):
    """STREAM_RESUME for a kept stream, and STREAM_RESET 1 at once after it
    for one we reset (§7.10)."""
    out = [F.frame(F.STREAM_RESUME, F.StreamResume(st.ordinal, st.name).encode_payload(), ch.number)]
    if st.reset_code is not None:
        ch.reset_sent = True
        out.append(F.frame(F.STREAM_RESET, st.reset_code.to_bytes(2, "big"), ch.number))
    return out


def open_frame(st, ch):
    return F.frame(F.STREAM_OPEN, string8(st.name), ch.number)
