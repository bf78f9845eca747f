"""§7.6 channels and flow control, §7.8 resources: the stream and resource
side of a Connection (a mixin; it uses the connection's queue, lock and
event log)."""
import hashlib
import os
import threading
import time

from . import frames as F
from .wire import ProtocolViolation, u32, string8

INITIAL_CHANNEL_WINDOW = 262_144
INITIAL_CONNECTION_WINDOW = 1_048_576
MAX_WINDOW = 0x7FFFFFFF
MAX_OPEN_CHANNELS = 64


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
        self.answer = None         # final outcome for an opener
        self.done = threading.Event()


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
                ch.send_window += inc
                if ch.send_window > MAX_WINDOW:
                    raise _failed("flowControlError: channel window overflow", 3)
            self.chan_lock.notify_all()

    def _on_channel_frame(self, fr):
        t, n = fr.type, fr.channel
        with self.chan_lock:
            ch = self.channels.get(n)
            if t in (F.STREAM_OPEN, F.RESOURCE_OFFER):
                if not self._peer_parity_ok(n) or n <= self.peer_highest:
                    raise ProtocolViolation("new channel parity/order")
                if sum(1 for c in self.channels.values() if not c.mine) >= MAX_OPEN_CHANNELS:
                    raise ProtocolViolation("too many channels", 2)
                self.peer_highest = n
                if t == F.STREAM_OPEN:
                    if self.session.refuse_streams:
                        self.enqueue(F.frame(F.STREAM_RESET, (3).to_bytes(2, "big"), n))
                        self._post("stream-refused", name=fr.value, channel=n)
                        self.refused[n] = 0
                        return
                    ch = self.channels[n] = _Channel(n, "stream", fr.value, mine=False)
                    self._post("stream-opened", name=fr.value, channel=n)
                else:
                    ch = self.channels[n] = _Channel(n, "resource", fr.value.name, mine=False)
                    ch.offer = fr.value
                    if self.session.refuse_resources:
                        del self.channels[n]
                        self.refused[n] = 0
                        self.enqueue(F.frame(F.STREAM_RESET, (3).to_bytes(2, "big"), n))
                        return
                    ch.accepted = 0
                    self.enqueue(F.frame(F.RESOURCE_ACCEPT, (0).to_bytes(8, "big"), n))
                    self._post("resource-started", name=ch.name, size=fr.value.size)
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
            if t in (F.STREAM_DATA, F.RESOURCE_CHUNK):
                if (t == F.STREAM_DATA) != (ch.kind == "stream"):
                    raise ProtocolViolation("wrong kind for channel")
                if ch.kind == "resource" and ch.length + len(fr.value) > ch.offer.size - ch.accepted:
                    raise ProtocolViolation("chunk beyond size")
                n_bytes = len(fr.value)
                if n_bytes > ch.recv_window or n_bytes > self.conn_recv_window:
                    raise _failed("flowControlError: window exceeded", 3)
                ch.recv_window -= n_bytes
                self.conn_recv_window -= n_bytes
                ch.hash.update(fr.value)
                ch.length += n_bytes
                if self.session.keep_channel_data:
                    ch.data += fr.value
                # the application takes the bytes at once
                ch.taken += n_bytes
                self.conn_taken += n_bytes
                return
            if t == F.STREAM_CLOSE and ch.kind == "stream":
                del self.channels[n]
                self._post("stream", name=ch.name, length=ch.length, sha256=ch.hash.hexdigest(),
                           payload=bytes(ch.data))
                return
            if t == F.STREAM_RESET:
                del self.channels[n]
                self._post("stream-failed" if ch.kind == "stream" else "resource-failed",
                           name=ch.name, code=fr.value)
                return
            if ch.kind == "resource" and t == F.RESOURCE_COMPLETE:
                ok = ch.length == ch.offer.size - ch.accepted and ch.hash.digest() == fr.value
                del self.channels[n]
                if ok:
                    self.enqueue(F.frame(F.RESOURCE_RECEIVED, b"", n))
                    self._post("resource", name=ch.name, length=ch.length, sha256=ch.hash.hexdigest(),
                               payload=bytes(ch.data))
                else:
                    self.enqueue(F.frame(F.RESOURCE_CANCEL, (2).to_bytes(2, "big"), n))
                    self._post("resource-failed", name=ch.name, code=2)
                return
            if ch.kind == "resource" and t == F.RESOURCE_CANCEL:
                del self.channels[n]
                self._post("resource-failed", name=ch.name, code=fr.value)
                return
            raise ProtocolViolation("%s not allowed on this channel" % fr.name)

    def _on_my_channel(self, ch, fr):
        t = fr.type
        if t == F.STREAM_RESET:
            ch.answer = ("reset", fr.value)
        elif ch.kind == "resource" and t == F.RESOURCE_ACCEPT:
            if ch.accepted is not None or fr.value > ch.offer.size:
                raise ProtocolViolation("second or out-of-range RESOURCE_ACCEPT")
            ch.accepted = fr.value
            self.chan_lock.notify_all()
            return
        elif ch.kind == "resource" and t == F.RESOURCE_RECEIVED:
            ch.answer = ("received", None)
        elif ch.kind == "resource" and t == F.RESOURCE_CANCEL:
            ch.answer = ("cancel", fr.value)
        else:
            raise ProtocolViolation("%s from the receiver" % fr.name)
        del self.channels[ch.number]
        ch.done.set()
        self.chan_lock.notify_all()

    def _flush_window_updates(self):
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

    def send_stream(self, name: str, data: bytes, timeout=60.0):
        """Opens a stream, writes `data`, closes it. True when all was sent."""
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

    def send_resource(self, name: str, data: bytes, transfer_id=None, timeout=60.0):
        """RESOURCE_OFFER, wait for RESOURCE_ACCEPT, chunks, COMPLETE, wait for
        the answer. Returns ("received", None), ("cancel", reason), ("reset", code)
        or ("failed", why)."""
        ch = self._open_channel("resource", name)
        ch.offer = F.ResourceOffer(len(data), transfer_id or os.urandom(16), name)
        self.enqueue(F.frame(F.RESOURCE_OFFER, ch.offer.encode_payload(), ch.number))
        deadline = time.monotonic() + timeout
        with self.chan_lock:
            while ch.accepted is None and not ch.done.is_set() and not self.closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return ("failed", "no RESOURCE_ACCEPT")
                self.chan_lock.wait(min(left, 0.5))
        if ch.done.is_set():
            return ch.answer or ("failed", "closed")
        if self.closed.is_set():
            return ("failed", "closed")
        if not self._send_flow_controlled(ch, F.RESOURCE_CHUNK, data[ch.accepted:], timeout):
            return ch.answer or ("failed", "chunks")
        self.enqueue(F.frame(F.RESOURCE_COMPLETE, hashlib.sha256(data).digest(), ch.number))
        if not ch.done.wait(max(0.0, deadline - time.monotonic())):
            return ("failed", "no answer")
        return ch.answer or ("failed", "closed")
