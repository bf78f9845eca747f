"""A thread-safe, append-only event log with bounded waits."""
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Event:
    kind: str            # state, message, datagram, stream, resource, pong, goodbye, trust, ...
    peer: object = None  # PeerID when known
    data: dict = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)

    def __repr__(self):
        d = {k: (v if not isinstance(v, (bytes, bytearray)) or len(v) < 40 else "<%d bytes>" % len(v))
             for k, v in self.data.items()}
        return "Event(%s, %s, %s)" % (self.kind, self.peer, d)


class EventLog:
    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def post(self, kind, peer=None, **data):
        with self.cond:
            self.events.append(Event(kind, peer, data))
            self.cond.notify_all()

    def mark(self) -> int:
        with self.cond:
            return len(self.events)

    def wait(self, pred, timeout: float, since: int = 0):
        """First event at index >= since matching pred, or None after timeout."""
        deadline = time.monotonic() + timeout
        i = since
        with self.cond:
            while True:
                while i < len(self.events):
                    ev = self.events[i]
                    i += 1
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def all(self, pred, since=0):
        with self.cond:
            return [e for e in self.events[since:] if pred(e)]
