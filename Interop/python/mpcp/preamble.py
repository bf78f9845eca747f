"""§3 connection preamble, version negotiation, and §4 encryption negotiation."""
from dataclasses import dataclass

from .wire import ProtocolViolation

MAGIC = b"MPCP"
OPTIONAL, REQUIRED, NONE = 0, 1, 2
PREFERENCE_NAMES = {"optional": OPTIONAL, "required": REQUIRED, "none": NONE}
FLAG_HAS_IDENTITY = 0x01

TLS = "tls"
PLAINTEXT = "plaintext"
REFUSED = "refused"


@dataclass(frozen=True)
class Preamble:
    preference: int
    has_identity: bool
    min_version: int = 1
    max_version: int = 1

    def encode(self) -> bytes:
        return MAGIC + bytes([self.min_version, self.max_version, self.preference,
                              FLAG_HAS_IDENTITY if self.has_identity else 0])

    @staticmethod
    def decode(data: bytes) -> "Preamble":
        if len(data) != 8:
            raise ProtocolViolation("preamble length")
        if data[:4] != MAGIC:
            raise ProtocolViolation("preamble magic")
        lo, hi, pref, flags = data[4], data[5], data[6], data[7]
        if lo == 0 or lo > hi:
            raise ProtocolViolation("preamble versions")
        if pref not in (0, 1, 2):
            raise ProtocolViolation("preamble preference")
        if flags & ~FLAG_HAS_IDENTITY:
            raise ProtocolViolation("preamble reserved flag")
        return Preamble(pref, bool(flags & FLAG_HAS_IDENTITY), lo, hi)


def negotiate_version(dialer: Preamble, listener: Preamble):
    """The negotiated version, or None when the ranges do not overlap."""
    v = min(dialer.max_version, listener.max_version)
    if v < max(dialer.min_version, listener.min_version):
        return None
    return v


def negotiate_encryption(p_a: int, id_a: bool, p_b: int, id_b: bool) -> str:
    """§4: symmetric in its two sides. Returns TLS, PLAINTEXT or REFUSED."""
    prefs = {p_a, p_b}
    if prefs == {NONE, REQUIRED}:
        return REFUSED                      # rule 1
    if REQUIRED in prefs:
        return TLS                          # rule 2
    if p_a == OPTIONAL and p_b == OPTIONAL:
        return TLS                          # rule 3
    if id_a or id_b:
        return TLS                          # rule 4
    return PLAINTEXT                        # rule 5


def rule_number(p_a, id_a, p_b, id_b) -> int:
    prefs = {p_a, p_b}
    if prefs == {NONE, REQUIRED}:
        return 1
    if REQUIRED in prefs:
        return 2
    if p_a == OPTIONAL and p_b == OPTIONAL:
        return 3
    return 4 if (id_a or id_b) else 5
