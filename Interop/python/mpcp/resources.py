"""§7.9 resources across a lost link: the verdicts a receiver sent for one
member's resources, so that a RESUMED offer of one it already answered is
answered again instead of arriving twice."""
import collections
import hashlib
import threading

from .wire import u64

# This peer takes at most 64 channels from one peer at once (§7.6), resources
# among them: so it remembers the latest 64 verdicts per member.
VERDICTS_KEPT = 64

RECEIVED = ("received", None)


class VerdictBook:
    """(transfer ID, size) -> the verdict sent: ("received", None) or
    ("cancel", 2 or 3). The latest `limit` only."""

    def __init__(self, limit=VERDICTS_KEPT):
        self.limit = limit
        self.lock = threading.Lock()
        self.verdicts = collections.OrderedDict()

    def remember(self, transfer_id, size, verdict):
        with self.lock:
            key = (bytes(transfer_id), size)
            self.verdicts.pop(key, None)
            self.verdicts[key] = verdict
            while len(self.verdicts) > self.limit:
                self.verdicts.popitem(last=False)

    def get(self, transfer_id, size):
        with self.lock:
            return self.verdicts.get((bytes(transfer_id), size))

    def __len__(self):
        with self.lock:
            return len(self.verdicts)


def transfer_id(receiver_identifier: bytes, data: bytes) -> bytes:
    """This peer's transfer ID (§6.4.14: the same for the same content to the
    same receiver): it has no source URL, so the content's digest names it."""
    return hashlib.sha256(b"mpcp-resource-id" + receiver_identifier + hashlib.sha256(data).digest()
                          + u64(len(data))).digest()[:16]
