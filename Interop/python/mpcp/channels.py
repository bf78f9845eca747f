"""§7.6 channels and flow control, §7.8 resources: the stream and resource
side of a Connection (a mixin; it uses the connection's queue, lock and
event log). §7.10 stream resumption: the receiver's answers and
acknowledgements here, what outlives the connection in streams.py."""
import hashlib
import os
import threading
import time

from . import frames as F
from .resources import RECEIVED
from .streams import InStream, OutStream
from .transport import TransportClosed
from .wire import ProtocolViolation, u32, u64, string8

INITIAL_CHANNEL_WINDOW = 262_144
INITIAL_CONNECTION_WINDOW = 1_048_576
MAX_WINDOW = 0x7FFFFFFF
MAX_OPEN_CHANNELS = 64


def new_send_id():
    """§6.4.14: a send ID, drawn at random for each send of a resource."""
    return int.from_bytes(os.urandom(8), "big")


def _failed(why, goodbye):
    from .connection import Failed
    return Failed(why, goodbye)


class _Channel:
    def __init__(self, number, kind, name, mine):
        self.number, self.kind, self.name, self.mine = number, kind, name, mine
        self.send_window = INITIAL_CHANNEL_WINDOW   # what we may still send (mine)
        self.recv_window = INITIAL_CHANNEL_WINDOW   # what the peer may still send (theirs)
        self.taken = 0                              # bytes taken since last WINDOW_UPDATE
        self.data = bytearray()
        self.hash = hashlib.sha256()
        self.length = 0
        self.offer = None
        self.accepted = None       # offset, once RESOURCE_ACCEPT is sent/read
        self.verdict = None        # receiver: the verdict a RESUMED offer is answered with (§7.9)
        self.verdict_digest = None # ... and the digest verified for it (RESOURCE_RECEIVED)
        self.answer = None         # final outcome for an opener
        self.done = threading.Event()
        self.ins = None            # receiver: the InStream this channel carries
        self.out = None            # opener with link recovery: the OutStream
        self.awaiting = False      # opener: STREAM_RESUME sent, its answer not read (§7.10)
        self.answer_pending = False  # receiver: STREAM_RESUME read, its answer not sent
        self.close_sent = False    # opener: STREAM_CLOSE / STREAM_RESET sent on this channel
        self.reset_sent = False


class ChannelsMixin:
    # -------------------------------------------------------- channels
    def _peer_parity_ok(self, ch):
        return (ch % 2 == 0) if self.dialer else (ch % 2 == 1)

    def _on_window_update(self, channel, inc):
        with self.chan_lock:
            if channel == 0:
                self.conn_send_window += inc
                if self.conn_send_window > MAX_WINDOW:
                    raise _failed("flowControlError: connection window overflow", 3)
            else:
                ch = self.channels.get(channel)
                if ch is None:
                    if not self._peer_parity_ok(channel) and channel < self.next_channel:
                        return   # a channel of ours that has ended: discard
                    raise ProtocolViolation("WINDOW_UPDATE for unknown channel")
                if not ch.mine:
                    raise ProtocolViolation("WINDOW_UPDATE from the opener")
                if ch.awaiting:
                    # §7.10: the answer to STREAM_RESUME comes before anything else on the channel
                    raise ProtocolViolation("WINDOW_UPDATE before the answer to STREAM_RESUME")
                ch.send_window += inc
                if ch.send_window > MAX_WINDOW:
                    raise _failed("flowControlError: channel window overflow", 3)
            self.chan_lock.notify_all()

    def _on_channel_frame(self, fr):
        t, n = fr.type, fr.channel
        with self.chan_lock:
            ch = self.channels.get(n)
            if t in (F.STREAM_OPEN, F.STREAM_RESUME, F.RESOURCE_OFFER):
                if t == F.STREAM_OPEN and self.session.hooks.pop("cut_on_stream_open", None):
                    self._cut("cut on STREAM_OPEN (test hook)")   # the open goes with the link
                if not self._peer_parity_ok(n) or n <= self.peer_highest:
                    raise ProtocolViolation("new channel parity/order")
                if sum(1 for c in self.channels.values() if not c.mine) >= MAX_OPEN_CHANNELS:
                    raise ProtocolViolation("too many channels", 2)
                self.peer_highest = n
                if t == F.STREAM_RESUME:
                    return self._on_stream_resume(n, fr.value)
                if t == F.STREAM_OPEN:
                    ordinal = None
                    if self.book is not None:
                        with self.book.cond:       # §7.10: refused ones count too
                            ordinal = self.book.peer_opened
                            self.book.peer_opened += 1
                    if self.session.refuse_streams:
                        self.enqueue(F.frame(F.STREAM_RESET, (3).to_bytes(2, "big"), n))
                        self._post("stream-refused", name=fr.value, channel=n, ordinal=ordinal)
                        self.refused[n] = 0
                        return
                    ch = self.channels[n] = _Channel(n, "stream", fr.value, mine=False)
                    self._attach_in(ch, InStream(self.session, self.peer_id, ordinal, fr.value))
                    self._post("stream-opened", name=fr.value, channel=n, ordinal=ordinal)
                else:
                    cut = self.session.hooks.get("cut_on_resource_offer")
                    if cut and (cut is True or cut(fr)):
                        self.session.hooks.pop("cut_on_resource_offer", None)
                        self._cut("cut on RESOURCE_OFFER (test hook)")   # the offer goes with the link
                    ch = self.channels[n] = _Channel(n, "resource", fr.value.name, mine=False)
                    ch.offer = fr.value
                    resumed = bool(fr.flags & F.FLAG_RESUMED)
                    book = self.member.verdicts if self.member is not None else None
                    key = fr.value.key      # §7.9: send ID and content together
                    # §7.9: a transfer of this send accepted on an earlier connection and
                    # never answered waits for this offer, RESUMED or not; another send of
                    # the same content, or one in progress here, is not it
                    waited = book is not None and book.waiting(key, self)
                    if resumed and book is not None and not waited:
                        # §7.9: this send, answered before the link went: accepted at its
                        # end, the new RESOURCE_COMPLETE answered with that verdict. A
                        # verdict on another send of the same content never answers it.
                        remembered = book.answer(key)
                        if remembered is not None:
                            ch.verdict, ch.verdict_digest = remembered
                            ch.accepted = fr.value.size
                            self.enqueue(F.frame(F.RESOURCE_ACCEPT, u64(fr.value.size), n))
                            self._post("resource-answered-again", name=ch.name, size=fr.value.size,
                                       verdict=ch.verdict, send_id=fr.value.send_id)
                            return
                    if self.session.refuse_resources:
                        del self.channels[n]
                        self.refused[n] = 0
                        self.enqueue(F.frame(F.STREAM_RESET, (3).to_bytes(2, "big"), n))
                        return
                    ch.accepted = 0
                    if book is not None:
                        book.accepted(key, self)
                    self.enqueue(F.frame(F.RESOURCE_ACCEPT, (0).to_bytes(8, "big"), n))
                    self._post("resource-started", name=ch.name, size=fr.value.size, resumed=resumed,
                               waited=waited, send_id=fr.value.send_id, channel=n)
                return
            if ch is None and n in self.refused:
                if t in (F.STREAM_DATA, F.RESOURCE_CHUNK):
                    self.refused[n] += len(fr.value)
                    if self.refused[n] > INITIAL_CHANNEL_WINDOW or len(fr.value) > self.conn_recv_window:
                        raise _failed("flowControlError: data for a reset channel", 3)
                    self.conn_recv_window -= len(fr.value)
                    self.conn_taken += len(fr.value)
                elif t in (F.STREAM_CLOSE, F.STREAM_RESET, F.RESOURCE_CANCEL):
                    self._post("refused-channel-ended", channel=n, by=fr.name, discarded=self.refused.pop(n))
                return   # §7.6: frames for a channel we reset are discarded
            if ch is None:
                if not self._peer_parity_ok(n) and n < self.next_channel:
                    return   # crossed our own close/reset: discard
                raise ProtocolViolation("%s for a channel that is not open" % fr.name)
            if ch.mine:
                return self._on_my_channel(ch, fr)
            # frames on a channel the peer opened
            if ch.answer_pending and t in (F.STREAM_DATA, F.STREAM_CLOSE):
                raise ProtocolViolation("%s before the answer to STREAM_RESUME" % fr.name)
            if t in (F.STREAM_DATA, F.RESOURCE_CHUNK):
                if (t == F.STREAM_DATA) != (ch.kind == "stream"):
                    raise ProtocolViolation("wrong kind for channel")
                if t == F.RESOURCE_CHUNK and self.session.hooks.pop("cut_on_resource_chunk", None):
                    self._cut("cut on RESOURCE_CHUNK (test hook)")   # accepted, then the link goes
                if t == F.RESOURCE_CHUNK:
                    how = self.session.hooks.pop("cancel_on_resource_chunk", None)
                    if how:
                        return self._cancel_incoming(ch, len(fr.value), lost=how == "lost")
                if ch.kind == "resource" and ch.length + len(fr.value) > ch.offer.size - ch.accepted:
                    raise ProtocolViolation("chunk beyond size")
                n_bytes = len(fr.value)
                if n_bytes > ch.recv_window or n_bytes > self.conn_recv_window:
                    raise _failed("flowControlError: window exceeded", 3)
                ch.recv_window -= n_bytes
                self.conn_recv_window -= n_bytes
                ch.length += n_bytes
                if ch.ins is not None:
                    ch.ins.take(fr.value, self.session.keep_channel_data)
                    self._stream_ack(ch)
                else:
                    ch.hash.update(fr.value)
                    if self.session.keep_channel_data:
                        ch.data += fr.value
                # the application takes the bytes at once
                ch.taken += n_bytes
                self.conn_taken += n_bytes
                return
            if t == F.STREAM_CLOSE and ch.kind == "stream":
                del self.channels[n]
                ins = self._end_in(ch)
                ins.state = "ended"
                self._post("stream", name=ch.name, length=ins.received, sha256=ins.hash.hexdigest(),
                           payload=bytes(ins.data), ordinal=ins.ordinal)
                return
            if t == F.STREAM_RESET:
                del self.channels[n]
                if ch.kind == "stream":
                    self._end_in(ch).fail(code=fr.value)
                else:
                    self._resource_ended(ch)
                    self._post("resource-failed", name=ch.name, code=fr.value)
                return
            if ch.kind == "resource" and t == F.RESOURCE_COMPLETE:
                del self.channels[n]
                if ch.verdict is not None:
                    # §7.9: answered again, nothing delivered again; RESOURCE_RECEIVED
                    # only if the new COMPLETE names the digest that was verified
                    verdict = ch.verdict
                    if verdict == RECEIVED and fr.value != ch.verdict_digest:
                        verdict = ("cancel", 2)
                    return self._send_verdict(ch, verdict, ch.verdict_digest if verdict == RECEIVED else None)
                ok = ch.length == ch.offer.size - ch.accepted and ch.hash.digest() == fr.value
                if ok:
                    self._post("resource", name=ch.name, length=ch.length, sha256=ch.hash.hexdigest(),
                               payload=bytes(ch.data), send_id=ch.offer.send_id)
                    self._send_verdict(ch, RECEIVED, ch.hash.digest())
                else:
                    self._post("resource-failed", name=ch.name, code=2)
                    self._send_verdict(ch, ("cancel", 2))
                return
            if ch.kind == "resource" and t == F.RESOURCE_CANCEL:
                del self.channels[n]
                self._resource_ended(ch)
                self._post("resource-failed", name=ch.name, code=fr.value)
                return
            raise ProtocolViolation("%s not allowed on this channel" % fr.name)

    def _resource_ended(self, ch):
        """Under chan_lock: the opener ended an incoming transfer (cancel or
        reset) with no verdict of ours: nothing waits for it (§7.9)."""
        if self.member is not None and ch.verdict is None:
            self.member.verdicts.ended(ch.offer.key, self)

    def _cancel_incoming(self, ch, discarded=0, lost=False):
        """Under chan_lock: our application cancels the incoming transfer on
        `ch` after accepting it: RESOURCE_CANCEL 1, which is no verdict
        (§7.9): nothing waits for it, and an offer of it made again is a new
        transfer. `discarded`: bytes of the chunk being read, dropped like
        the ones in flight after it. `lost` (test hook): the cancel goes with
        the link (TCP reset instead of sending it)."""
        del self.channels[ch.number]
        self.refused[ch.number] = discarded  # §7.6: its chunks in flight are discarded
        self.conn_recv_window -= discarded
        self.conn_taken += discarded
        self._resource_ended(ch)
        self._post("resource-cancelled", name=ch.name, channel=ch.number, send_id=ch.offer.send_id,
                   lost=lost)
        if lost:
            self._cut("cut instead of RESOURCE_CANCEL 1 (test hook)")
        self.enqueue(F.frame(F.RESOURCE_CANCEL, (1).to_bytes(2, "big"), ch.number))

    def _on_my_channel(self, ch, fr):
        t = fr.type
        if ch.out is not None:
            # §7.10: a stream with link recovery is kept until STREAM_ACK CLOSED or a reset
            if t == F.STREAM_ACK:
                closed = bool(fr.flags & F.FLAG_CLOSED)
                if closed and self.session.hooks.pop("cut_on_closed_ack", None):
                    self._cut("cut on STREAM_ACK CLOSED (test hook)")   # the ack goes with the link
                ended = ch.out.on_ack(ch, fr.value, closed)
            elif t == F.STREAM_RESET:
                ch.out.on_reset(ch, fr.value)
                ended = True
            else:
                raise ProtocolViolation("%s from the receiver" % fr.name)
            if ended:
                self.channels.pop(ch.number, None)
                ch.done.set()
            self.chan_lock.notify_all()
            return
        if t == F.STREAM_RESET:
            ch.answer = ("reset", fr.value)
        elif ch.kind == "resource" and t == F.RESOURCE_ACCEPT:
            if ch.accepted is not None or fr.value > ch.offer.size:
                raise ProtocolViolation("second or out-of-range RESOURCE_ACCEPT")
            ch.accepted = fr.value
            self._post("resource-accepted", name=ch.name, offset=fr.value, size=ch.offer.size)
            self.chan_lock.notify_all()
            return
        elif ch.kind == "resource" and t == F.RESOURCE_RECEIVED:
            if self.session.hooks.pop("cut_on_resource_received", None):
                self._cut("cut on RESOURCE_RECEIVED (test hook)")   # the verdict goes with the link
            ch.answer = ("received", None)
        elif ch.kind == "resource" and t == F.RESOURCE_CANCEL:
            ch.answer = ("cancel", fr.value)
        else:
            raise ProtocolViolation("%s from the receiver" % fr.name)
        del self.channels[ch.number]
        ch.done.set()
        self.chan_lock.notify_all()

    def _send_verdict(self, ch, verdict, digest=None):
        """Under chan_lock: RESOURCE_RECEIVED (for the verified `digest`) or
        RESOURCE_CANCEL 2/3 for the resource on `ch`; with a member it is
        remembered first, by the offer's send ID and content (§7.9), so that
        one lost with the link is answered again, not delivered twice."""
        if self.member is not None:
            self.member.verdicts.remember(ch.offer.key, verdict, self, digest)
        if verdict == RECEIVED and self.session.hooks.pop("cut_instead_of_resource_received", None):
            self._cut("cut instead of RESOURCE_RECEIVED (test hook)")   # the verdict goes with the link
        if verdict == RECEIVED:
            self.enqueue(F.frame(F.RESOURCE_RECEIVED, b"", ch.number))
        else:
            self.enqueue(F.frame(F.RESOURCE_CANCEL, verdict[1].to_bytes(2, "big"), ch.number))

    # ------------------------------------------------ §7.10 receiver side
    def _attach_in(self, ch, ins):
        """Under chan_lock: `ch` carries `ins` from now on."""
        ch.ins = ins
        ins.conn, ins.channel = self, ch
        ins.since_ack = 0          # counted from the frame that opened it here
        if self.book is not None and ins.ordinal is not None:
            with self.book.cond:
                self.book.incoming[ins.ordinal] = ins

    def _end_in(self, ch):
        """Under chan_lock: the opener ended the stream on `ch` (STREAM_CLOSE or
        STREAM_RESET); STREAM_ACK with CLOSED at once (§7.10)."""
        ins = ch.ins
        if self.book is not None:
            with self.book.cond:
                if self.book.incoming.get(ins.ordinal) is ins:
                    del self.book.incoming[ins.ordinal]
            if not (self.session.hooks.get("no_stream_ack") or self.session.hooks.get("no_closed_ack")):
                self.enqueue(F.frame(F.STREAM_ACK, u64(ins.received), ch.number, F.FLAG_CLOSED))
        ins.conn = ins.channel = None
        return ins

    def _stream_ack(self, ch):
        if self.book is None or self.session.hooks.get("no_stream_ack") or ch.answer_pending:
            return
        ack = ch.ins.ack_due()
        if ack is not None:
            self.enqueue(ack)

    def _on_stream_resume(self, n, sr):
        """Under chan_lock: STREAM_RESUME opens channel `n` (§7.10)."""
        book = self.book
        with book.cond:
            if sr.ordinal > book.peer_opened:
                raise ProtocolViolation("STREAM_RESUME ordinal %d above our count %d" % (sr.ordinal, book.peer_opened))
            if sr.ordinal == book.peer_opened:
                # its STREAM_OPEN went with the lost connection: a new stream
                book.peer_opened += 1
                if self.session.refuse_streams:
                    self.enqueue(F.frame(F.STREAM_RESET, (3).to_bytes(2, "big"), n))
                    self._post("stream-refused", name=sr.name, channel=n, ordinal=sr.ordinal)
                    self.refused[n] = 0
                    return
                ins, new = InStream(self.session, self.peer_id, sr.ordinal, sr.name), True
            else:
                ins, new = book.incoming.get(sr.ordinal), False
                if ins is None or ins.state != "reading":
                    # it ended here (we read its end, or reset it ourselves)
                    self.enqueue(F.frame(F.STREAM_RESET, (1).to_bytes(2, "big"), n))
                    self.refused[n] = 0
                    self._post("stream-resume-ended", name=sr.name, channel=n, ordinal=sr.ordinal)
                    return
                if ins.conn is self:
                    # not in §7.10: a stream still open on this very connection (SPEC-GAPS 31)
                    raise ProtocolViolation("STREAM_RESUME for a stream open on channel %d" % ins.channel.number)
        ch = self.channels[n] = _Channel(n, "stream", ins.name, mine=False)
        self._attach_in(ch, ins)
        answer = F.frame(F.STREAM_ACK, u64(ins.received), n)
        delay = self.session.hooks.get("hold_resume_answer")
        if delay:
            # test hook: a receiver slow to answer, so data before the answer can be seen
            ch.answer_pending = True
            threading.Timer(delay, self._send_resume_answer, (ch, answer)).start()
        else:
            self.enqueue(answer)
        self._post("stream-resumed", name=ins.name, channel=n, ordinal=sr.ordinal, received=ins.received, new=new)

    def _send_resume_answer(self, ch, answer):
        with self.chan_lock:
            if self.channels.get(ch.number) is ch and not self.closed.is_set():
                self.enqueue(answer)
                ch.answer_pending = False

    def _cut(self, why):
        """Test hook: the link goes now, the frame being read with it."""
        self.reset()
        self.end_reason = why
        raise TransportClosed(why)

    def _detach_streams(self):
        """The connection ended: streams with link recovery wait for a
        resumption; the others fail (§7.10)."""
        with self.chan_lock:
            chans = list(self.channels.values())
        for ch in chans:
            if ch.out is not None:
                ch.out.detach(self)
            elif ch.ins is not None and ch.ins.conn is self:
                ch.ins.conn = ch.ins.channel = None
                if self.book is None:
                    ch.ins.fail(reason="connectionLost")

    def _flush_window_updates(self):
        if self.book is not None and not self.session.hooks.get("no_stream_ack"):
            with self.chan_lock:
                for ch in self.channels.values():
                    if ch.ins is not None:
                        self._stream_ack(ch)
        if self.session.hooks.get("hold_window"):
            return      # test hook: a reader that stops reading
        out = []
        with self.chan_lock:
            for ch in self.channels.values():
                if not ch.mine and ch.taken >= INITIAL_CHANNEL_WINDOW // 4:
                    out.append(F.frame(F.WINDOW_UPDATE, u32(ch.taken), ch.number))
                    ch.recv_window += ch.taken
                    ch.taken = 0
            if self.conn_taken >= 65536:
                out.append(F.frame(F.WINDOW_UPDATE, u32(self.conn_taken)))
                self.conn_recv_window += self.conn_taken
                self.conn_taken = 0
        if out:
            self.enqueue(*out)

    def _open_channel(self, kind, name):
        with self.chan_lock:
            n = self.next_channel
            self.next_channel += 2
            ch = self.channels[n] = _Channel(n, kind, name, mine=True)
            return ch

    def _send_flow_controlled(self, ch, ftype, data, timeout):
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        while view:
            with self.chan_lock:
                while True:
                    if self.closed.is_set() or ch.done.is_set():
                        return False
                    n = min(len(view), 65536, ch.send_window, self.conn_send_window)
                    if n > 0:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.chan_lock.wait(min(left, 0.5))
                ch.send_window -= n
                self.conn_send_window -= n
            self.enqueue(F.frame(ftype, bytes(view[:n]), ch.number))
            view = view[n:]
        return True

    def open_out(self, st):
        """Opens OutStream `st` here: its ordinal and STREAM_OPEN (§7.10)."""
        book = st.book
        with self.chan_lock:
            with book.cond:
                ch = self._open_channel("stream", st.name)
                self.enqueue(book.open(st, self, ch))

    def send_stream(self, name: str, data: bytes, timeout=60.0):
        """Opens a stream, writes `data`, closes it. True when all was sent
        (with link recovery: and the close, through any resumption)."""
        if self.book is not None:
            if self.member is not None:
                st = self.session.open_stream(self.peer_id, name)
            else:
                st = OutStream(self.session, self.book, self.peer_id, name)
                self.open_out(st)
            ok = st.write(data, timeout)
            st.close()
            return ok and st.wait_close_sent(timeout)
        ch = self._open_channel("stream", name)
        self.enqueue(F.frame(F.STREAM_OPEN, string8(name), ch.number))
        if not self._send_flow_controlled(ch, F.STREAM_DATA, data, timeout):
            return False
        with self.chan_lock:
            if ch.done.is_set():
                return False
            self.channels.pop(ch.number, None)
        self.enqueue(F.frame(F.STREAM_CLOSE, b"", ch.number))
        return True

    def send_resource(self, name: str, data: bytes, transfer_id=None, timeout=60.0, resumed=False,
                      send_id=None, sha256=None):
        """RESOURCE_OFFER (RESUMED if `resumed`), wait for RESOURCE_ACCEPT,
        chunks, COMPLETE, wait for the answer. Returns ("received", None),
        ("cancel", reason), ("reset", code) or ("failed", why)."""
        return self.offer_resource(name, data, transfer_id, timeout, resumed, send_id, sha256)[0]

    def resource_offer(self, size, transfer_id, name, send_id=None):
        """The ResourceOffer this connection sends: with link recovery it
        carries a send ID (SEND_ID, §6.4.14), `send_id` or a random one;
        without it none, whatever `send_id` says."""
        if not self.link_recovery:
            send_id = None
        elif send_id is None:
            send_id = new_send_id()
        return F.ResourceOffer(size, transfer_id, name, send_id)

    def offer_resource(self, name: str, data: bytes, transfer_id=None, timeout=60.0, resumed=False,
                       send_id=None, sha256=None):
        """send_resource, returning (outcome, accepted): accepted is True once
        the receiver's RESOURCE_ACCEPT was read here. A transfer whose verdict
        went unread with the link is offered again with RESUMED only if it was
        (§7.9): an offer that went unanswered may never have been read, and a
        verdict the receiver remembers for the same content is then an
        earlier transfer's. With link recovery the offer carries `send_id`
        (the send's, kept by the caller for every offer of it; a new random
        one if None). `sha256` (tests): the digest RESOURCE_COMPLETE names
        instead of the content's."""
        ch = self._open_channel("resource", name)
        ch.offer = self.resource_offer(len(data), transfer_id or os.urandom(16), name, send_id)
        self.enqueue(F.offer_frame(ch.offer, ch.number, resumed))
        deadline = time.monotonic() + timeout

        def outcome(res):
            # the reader handles an ACCEPT before the connection counts as closed,
            # so once it is, ch.accepted says whether one was read
            return res, ch.accepted is not None
        with self.chan_lock:
            while ch.accepted is None and not ch.done.is_set() and not self.closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return outcome(("failed", "no RESOURCE_ACCEPT"))
                self.chan_lock.wait(min(left, 0.5))
        if ch.done.is_set():
            return outcome(ch.answer or ("failed", "closed"))
        if self.closed.is_set():
            return outcome(("failed", "closed"))
        if not self._send_flow_controlled(ch, F.RESOURCE_CHUNK, data[ch.accepted:], timeout):
            return outcome(ch.answer or ("failed", "chunks"))
        self.enqueue(F.frame(F.RESOURCE_COMPLETE, sha256 or hashlib.sha256(data).digest(), ch.number))
        if not ch.done.wait(max(0.0, deadline - time.monotonic())):
            return outcome(("failed", "no answer"))
        return outcome(ch.answer or ("failed", "closed"))
