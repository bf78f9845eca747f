"""§7.9 resources across a lost link: the verdicts a receiver sent for one
member's resources, so that a RESUMED offer of a send it already answered is
answered again instead of arriving twice, and the transfers it accepted and
has not answered, so that one interrupted by a loss is taken up again. Both
are matched by the offer's send ID and content (transfer ID and size)
together, never by content alone: another send of the same content is
another transfer."""
import collections
import hashlib
import threading

from .wire import u64

# This peer takes at most 64 channels from one peer at once (§7.6), resources
# among them: so it remembers the latest 64 verdicts per member.
VERDICTS_KEPT = 64

RECEIVED = ("received", None)


def offer_key(send_id, transfer_id, size):
    """§7.9: what a receiver matches an offer by (ResourceOffer.key)."""
    return (send_id, bytes(transfer_id), size)


class VerdictBook:
    """Per member, by key (send ID, transfer ID, size; `offer_key`): the
    verdict sent on that send, ("received", None) or ("cancel", 2 or 3),
    with the digest verified for RESOURCE_RECEIVED, the latest `limit` only;
    and the transfers of that send accepted and not yet answered, by the
    connection that carries them. One whose connection is gone waits for the
    offer of the same send that resumes it (§7.9); this peer keeps no
    partial, so that offer starts again from 0. An offer of the same content
    under another send ID matches neither."""

    def __init__(self, limit=VERDICTS_KEPT):
        self.limit = limit
        self.lock = threading.Lock()
        self.verdicts = collections.OrderedDict()   # key -> (verdict, digest verified or None)
        self.pending = collections.OrderedDict()    # key -> [Connection] accepted, unanswered

    def remember(self, key, verdict, conn=None, digest=None):
        """The verdict on the send `key`, accepted on `conn`, was sent;
        `digest` is the SHA-256 verified for RESOURCE_RECEIVED."""
        with self.lock:
            self.verdicts.pop(key, None)
            self.verdicts[key] = (verdict, digest)
            while len(self.verdicts) > self.limit:
                self.verdicts.popitem(last=False)
            self._drop(key, conn)

    def get(self, key):
        """The verdict remembered for the send `key`, or None."""
        with self.lock:
            got = self.verdicts.get(key)
            return got and got[0]

    def answer(self, key):
        """(verdict, digest) remembered for the send `key`, or None."""
        with self.lock:
            return self.verdicts.get(key)

    def waiting(self, key, conn):
        """True if a transfer of the send `key` was accepted on a connection
        other than `conn` (an earlier one, lost) and never answered."""
        with self.lock:
            return any(c is not conn for c in self.pending.get(key, ()))

    def accepted(self, key, conn):
        """A transfer of the send `key` was accepted on `conn`; it takes over
        the one of that send that waited (accepted on an earlier connection),
        if any."""
        with self.lock:
            conns = self.pending.pop(key, [])
            for i, c in enumerate(conns):
                if c is not conn:
                    del conns[i]
                    break
            conns.append(conn)
            self.pending[key] = conns
            while len(self.pending) > self.limit:
                self.pending.popitem(last=False)

    def ended(self, key, conn):
        """A transfer of the send `key` accepted on `conn` ended without a
        verdict (the sender's cancel or reset, or our application's cancel,
        RESOURCE_CANCEL 1, which is no verdict): nothing waits for it."""
        with self.lock:
            self._drop(key, conn)

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
