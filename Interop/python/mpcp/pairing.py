"""§7.3 pairing commitment and pairing code."""
import hashlib

COMMIT_PREFIX = b"mpcp pairing commit v1"
CODE_PREFIX = b"mpcp pairing code v1"
EXPORTER_LABEL = b"EXPORTER-mpcp-pairing"


def commitment(nonce: bytes) -> bytes:
    return hashlib.sha256(COMMIT_PREFIX + nonce).digest()


def code(exported: bytes, dialer_id: bytes, listener_id: bytes, commit: bytes, nd: bytes, nl: bytes) -> str:
    d = hashlib.sha256(CODE_PREFIX + exported + dialer_id + listener_id + commit + nd + nl).digest()
    n = int.from_bytes(d[:8], "big") % 1_000_000
    s = "%06d" % n
    return s[:3] + " " + s[3:]
