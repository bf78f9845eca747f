"""The repository's test identities (Certificates/peers), for the loopback tests."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from mpcp.tls import Identity      # noqa: E402

CERTS = HERE.parents[1] / "Certificates"
PASSWORD = (CERTS / "password.txt").read_text().splitlines()[0].encode()


def identity(name):
    """The named peer's identity, or None for no name."""
    return Identity.load_p12(str(CERTS / "peers" / (name + ".p12")), PASSWORD) if name else None
