"""§7.9 link recovery: the values exported at establishment (§5.1) and the
RESUME proof. Kept apart from the connection so the tests can check it
against the §11 vectors without sockets."""
import hashlib
import hmac

LABEL_ID = b"MPCP resumption v2 id"
LABEL_KEY = b"MPCP resumption v2 key"
LABEL_BINDING = b"MPCP resumption v2 binding"
PROOF_PREFIX = b"MPCP resume v2"
ROLE_DIALER, ROLE_LISTENER = 0, 1


def proof(key: bytes, role: int, binding: bytes) -> bytes:
    """HMAC-SHA256(resumption key, "MPCP resume v2" || role || binding)."""
    if len(key) != 32 or len(binding) != 32 or role not in (ROLE_DIALER, ROLE_LISTENER):
        raise ValueError("resumption proof inputs")
    return hmac.new(key, PROOF_PREFIX + bytes([role]) + binding, hashlib.sha256).digest()


def check(key: bytes, role: int, binding: bytes, got: bytes) -> bool:
    return hmac.compare_digest(proof(key, role, binding), got)


def exported(transport):
    """(resumption ID, resumption key) of an established connection (§5.1)."""
    return transport.export(LABEL_ID, 16, b""), transport.export(LABEL_KEY, 32, b"")


def binding(transport) -> bytes:
    return transport.export(LABEL_BINDING, 32, b"")
