"""§5 TLS 1.3 channel on pyOpenSSL: contexts, identities, exporter."""
import datetime
import hashlib
from dataclasses import dataclass, field
from typing import List, Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from OpenSSL import SSL, crypto
from OpenSSL._util import lib as _lib

ALPN = b"mpcp/1"
CIPHERSUITES = b"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
GROUPS = b"X25519:P-256"


@dataclass
class Identity:
    key: object                       # cryptography private key
    cert: x509.Certificate            # leaf
    chain: List[x509.Certificate] = field(default_factory=list)  # intermediates

    @staticmethod
    def load_p12(path, password: bytes) -> "Identity":
        with open(path, "rb") as f:
            key, cert, extra = pkcs12.load_key_and_certificates(f.read(), password)
        # Keep only intermediates (drop a self-signed root if one is bundled).
        chain = [c for c in (extra or []) if c.subject != c.issuer]
        return Identity(key, cert, chain)

    @property
    def fingerprint(self) -> bytes:
        return fingerprint(self.cert)


def fingerprint(cert: x509.Certificate) -> bytes:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()


def ephemeral_identity() -> Identity:
    """A fresh self-signed certificate for a server without an identity (§5)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mpcp ephemeral")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return Identity(key, cert, [])


def _accept_any(conn, cert, errnum, depth, ok):
    return True   # chain validation is the trust step's business (§5)


def make_context(server: bool, identity: Optional[Identity], *, alpn=ALPN, tickets=False) -> SSL.Context:
    ctx = SSL.Context(SSL.TLS_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
    ctx.set_max_proto_version(SSL.TLS1_3_VERSION)
    ctx.set_tls13_ciphersuites(CIPHERSUITES)
    ctx.set_cipher_list(b"DEFAULT:@SECLEVEL=2")
    if _lib.SSL_CTX_set1_curves_list(ctx._context, GROUPS) != 1:
        raise RuntimeError("could not set groups")
    if tickets:   # test hook only: a client that keeps sessions, to try resumption
        ctx.set_session_cache_mode(SSL.SESS_CACHE_CLIENT)
    else:
        ctx.set_options(SSL.OP_NO_TICKET)
        ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    ctx.set_verify(SSL.VERIFY_PEER, _accept_any)   # server: always request a client cert
    if server and identity is None:
        identity = ephemeral_identity()
    if identity is not None:
        ctx.use_certificate(identity.cert)
        ctx.use_privatekey(identity.key)
        for c in identity.chain:
            ctx.add_extra_chain_cert(c)
        ctx.check_privatekey()
    if server:
        def select(conn, protos):
            return alpn if alpn in protos else SSL.NO_OVERLAPPING_PROTOCOLS
        ctx.set_alpn_select_callback(select)
    else:
        ctx.set_alpn_protos([alpn])
    return ctx


def peer_chain(conn: SSL.Connection) -> List[x509.Certificate]:
    """The peer's certificates, leaf first (empty when it presented none)."""
    leaf = conn.get_peer_certificate(as_cryptography=True)
    if leaf is None:
        return []
    out = [leaf]
    leaf_der = leaf.public_bytes(serialization.Encoding.DER)
    for cc in conn.get_peer_cert_chain(as_cryptography=True) or []:
        if cc.public_bytes(serialization.Encoding.DER) != leaf_der:
            out.append(cc)
    return out


def verify_chain(chain: List[x509.Certificate], ca_pem_path: str) -> bool:
    """A simple trust decision for the Python application: the chain verifies
    to one of the anchors in the PEM file (OpenSSL X509 store)."""
    if not chain:
        return False
    store = crypto.X509Store()
    with open(ca_pem_path, "rb") as f:
        for c in x509.load_pem_x509_certificates(f.read()):
            store.add_cert(crypto.X509.from_cryptography(c))
    ctx = crypto.X509StoreContext(store, crypto.X509.from_cryptography(chain[0]),
                                  [crypto.X509.from_cryptography(c) for c in chain[1:]])
    try:
        ctx.verify_certificate()
        return True
    except crypto.X509StoreContextError:
        return False
