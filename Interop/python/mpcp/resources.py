"""§7.9 resources across a lost link: the verdicts a receiver sent for one
member's resources, so that a RESUMED offer of one it already answered is
answered again instead of arriving twice, and the transfers it accepted and
has not answered, so that one interrupted by a loss is taken up again rather
than answered with an earlier transfer's verdict."""
import collections
import hashlib
import threading

from .wire import u64

# This peer takes at most 64 channels from one peer at once (§7.6), resources
# among them: so it remembers the latest 64 verdicts per member.
VERDICTS_KEPT = 64

RECEIVED = ("received", None)


class VerdictBook:
    """Per member, by (transfer ID, size): the verdict sent on the latest
    transfer of it answered, ("received", None) or ("cancel", 2 or 3), the
    latest `limit` only; and the transfers of it accepted and not yet
    answered, by the connection that carries them. One whose connection is
    gone waits for the offer that resumes it (§7.9: a receiver prefers a
    transfer of the same content that still waits to the latest verdict,
    which is then an earlier transfer's); this peer keeps no partial, so that
    offer starts again from 0."""

    def __init__(self, limit=VERDICTS_KEPT):
        self.limit = limit
        self.lock = threading.Lock()
        self.verdicts = collections.OrderedDict()
        self.pending = collections.OrderedDict()    # key -> [Connection] accepted, unanswered

    def remember(self, transfer_id, size, verdict, conn=None):
        """The verdict on a transfer accepted on `conn` was sent."""
        with self.lock:
            key = (bytes(transfer_id), size)
            self.verdicts.pop(key, None)
            self.verdicts[key] = verdict
            while len(self.verdicts) > self.limit:
                self.verdicts.popitem(last=False)
            self._drop(key, conn)

    def get(self, transfer_id, size):
        with self.lock:
            return self.verdicts.get((bytes(transfer_id), size))

    def waiting(self, transfer_id, size, conn):
        """True if a transfer of this content was accepted on a connection
        other than `conn` (an earlier one, lost) and never answered."""
        with self.lock:
            return any(c is not conn for c in self.pending.get((bytes(transfer_id), size), ()))

    def accepted(self, transfer_id, size, conn):
        """A transfer of this content was accepted on `conn`; it takes over
        one that waited (accepted on an earlier connection), if any."""
        with self.lock:
            key = (bytes(transfer_id), size)
            conns = self.pending.pop(key, [])
            for i, c in enumerate(conns):
                if c is not conn:
                    del conns[i]
                    break
            conns.append(conn)
            self.pending[key] = conns
            while len(self.pending) > self.limit:
                self.pending.popitem(last=False)

    def ended(self, transfer_id, size, conn):
        """A transfer accepted on `conn` ended without a verdict of ours
        (the sender's cancel or reset): nothing waits for it."""
        with self.lock:
            self._drop((bytes(transfer_id), size), conn)

    def _drop(self, key, conn):
        conns = self.pending.get(key)
        if conns is None:
            return
        for i, c in enumerate(conns):
            if c is conn:
                del conns[i]
                break
        if not conns:
            del self.pending[key]

    def __len__(self):
        with self.lock:
            return len(self.verdicts)


def transfer_id(receiver_identifier: bytes, data: bytes) -> bytes:
    """This peer's transfer ID (§6.4.14: the same for the same content to the
    same receiver): it has no source URL, so the content's digest names it."""
    return hashlib.sha256(b"mpcp-resource-id" + receiver_identifier + hashlib.sha256(data).digest()
                          + u64(len(data))).digest()[:16]
