"""The repository's test identities (Certificates/peers), and the Sessions
and connected pairs the loopback tests make from them."""
import contextlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp.session import Session   # noqa: E402
from mpcp.tls import Identity      # noqa: E402

CERTS = HERE.parents[1] / "Certificates"
PASSWORD = (CERTS / "password.txt").read_text().splitlines()[0].encode()


def identity(name):
    """The named peer's identity, or None for no name."""
    return Identity.load_p12(str(CERTS / "peers" / (name + ".p12")), PASSWORD) if name else None


@contextlib.contextmanager
def loopback_sessions():
    """Yields make(name, preference="required", **kw): alice's ("a") or
    bob's ("b") Session (no identity with preference "none"), grace 30 unless
    told. Closes every Session it made at the end."""
    made = []

    def make(name, preference="required", **kw):
        kw.setdefault("identity", identity({"a": "alice", "b": "bob"}[name]) if preference != "none" else None)
        kw.setdefault("grace", 30)
        s = Session(name, preference, **kw)
        made.append(s)
        return s
    try:
        yield make
    finally:
        for s in made:
            s.close()


def pair(a, b):
    """a dials b; both connected. Returns (a's, b's) connection."""
    conn = a.connect(b.make_connection_data(a.peer_id))
    ev_a = a.events.wait(lambda e: e.kind == "state" and e.data["state"] != "connecting", 5)
    ev_b = b.events.wait(lambda e: e.kind == "state" and e.data["state"] != "connecting", 5)
    assert ev_a and ev_a.data["state"] == "connected", ev_a
    assert ev_b and ev_b.data["state"] == "connected", ev_b
    return conn, ev_b.data["conn"]
