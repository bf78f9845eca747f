#!/usr/bin/env python3
"""TLS probing suite for an MPCP listener (docs/PROTOCOL.md §3, §4, §5, §9.3).

Uses tlslite-ng, a pure-Python TLS stack independent of OpenSSL, plus a few
hand-built ClientHellos, against a listener on 127.0.0.1 only.

    probe.py --connection-data HEX [--certs DIR] [--password-file FILE]

The connection data is the listener's (interop-peer `DATA` line, §9.3); the
probe takes the 127.0.0.1 endpoint's port and the certificate fingerprint from
it. Prints one line per probe, `name PASS|FAIL detail`, then a summary; exits
1 on any FAIL, 2 on a usage or setup error.
"""

import argparse
import hashlib
import os
import select
import signal
import socket
import struct
import sys
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa, x25519
from cryptography.x509.oid import NameOID
import datetime

from tlslite.api import TLSConnection, HandshakeSettings, X509CertChain, parsePEMKey
from tlslite.errors import (TLSRemoteAlert, TLSLocalAlert, TLSAbruptCloseError,
                            TLSError)
from tlslite.constants import AlertDescription, GroupName, ExtensionType, CipherSuite
from tlslite.messages import ServerHello, CertificateRequest

HOST = "127.0.0.1"          # the only address this probe ever talks to
SOCK_TIMEOUT = 5.0          # every socket operation
PASSIVE_WAIT = 1.0          # after a handshake: does the listener close on its own?
RUN_BUDGET = 45.0           # no new probe starts after this (seconds)
HARD_LIMIT = 55             # SIGALRM: the whole run never exceeds this
ALPN = b"mpcp/1"
MAGIC = b"MPCP"
T0 = time.monotonic()


# ---------------------------------------------------------------- encodings

def preamble(pref=1, has_identity=True, vmin=1, vmax=1):
    """§3: magic, minVersion, maxVersion, encryptionPreference, flags."""
    return MAGIC + bytes([vmin, vmax, pref, 1 if has_identity else 0])


def parse_connection_data(blob):
    """§9.3. Returns dict with pref, has_identity, fingerprint, endpoints."""
    if len(blob) > 512 or blob[:4] != b"MPCD" or blob[4] != 1:
        raise ValueError("not MPCD version 1")
    pref, flags, reserved = blob[5], blob[6], blob[7]
    if pref > 2 or flags & 0xFE or reserved:
        raise ValueError("bad preference, flags or reserved")
    pos = 8
    token = blob[pos:pos + 16]; pos += 16
    for_peer = blob[pos:pos + 16]; pos += 16
    if blob[pos] != 1:
        raise ValueError("peer ID encodingVersion")
    ident = blob[pos + 1:pos + 17]
    nlen = blob[pos + 17]
    if not 1 <= nlen <= 63:
        raise ValueError("display name length")
    name = blob[pos + 18:pos + 18 + nlen].decode("utf-8")
    pos += 18 + nlen
    flen = blob[pos]; pos += 1
    if flen not in (0, 32) or (flen == 32) != bool(flags & 1):
        raise ValueError("fingerprint presence")
    fingerprint = blob[pos:pos + flen]; pos += flen
    count = blob[pos]; pos += 1
    if not 1 <= count <= 8:
        raise ValueError("endpointCount")
    endpoints = []
    for _ in range(count):
        fam = blob[pos]; pos += 1
        alen = {4: 4, 6: 16}[fam]
        addr = blob[pos:pos + alen]; pos += alen
        port = struct.unpack(">H", blob[pos:pos + 2])[0]; pos += 2
        endpoints.append((fam, addr, port))
    if pos != len(blob):
        raise ValueError("trailing bytes")
    return dict(pref=pref, has_identity=bool(flags & 1), token=token,
                for_peer=for_peer, identifier=ident, name=name,
                fingerprint=fingerprint, endpoints=endpoints)


def frame(ftype, payload=b"", flags=0, channel=0):
    """§6.1 frame header + payload."""
    return struct.pack(">BBHII", ftype, flags, 0, channel, len(payload)) + payload


PING = frame(0x07, b"\x00" * 8)
FRAME_NAMES = {0x01: "HELLO", 0x06: "GOODBYE", 0x07: "PING", 0x08: "PONG"}


# ---------------------------------------------------------------- identities

class Identity:
    def __init__(self, name, chain, key):
        self.name, self.chain, self.key = name, chain, key


def load_identity(certs_dir, name, password):
    with open(os.path.join(certs_dir, name + ".pem")) as f:
        pem = f.read()
    with open(os.path.join(certs_dir, name + ".key"), "rb") as f:
        enc = f.read()
    # tlslite-ng cannot read encrypted PKCS#8: decrypt with `cryptography`.
    key = serialization.load_pem_private_key(enc, password=password)
    plain = key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode()
    chain = X509CertChain()
    chain.parsePemList(pem)
    return Identity(name, chain, parsePEMKey(plain, private=True,
                                             implementations=["python"]))


def make_rsa_identity(bits):
    """A self-signed leaf with an RSA key of that size (1024: below level 2)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rsa-%d" % bits)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .sign(key, hashes.SHA256()))
    chain = X509CertChain()
    chain.parsePemList(cert.public_bytes(serialization.Encoding.PEM).decode())
    plain = key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode()
    return Identity("rsa-%d" % bits, chain,
                    parsePEMKey(plain, private=True, implementations=["python"]))


# ---------------------------------------------------------------- transport

def open_with_preamble(port, pre):
    """TCP connect, send our preamble, read the listener's 8 bytes."""
    s = socket.create_connection((HOST, port), timeout=SOCK_TIMEOUT)
    s.settimeout(SOCK_TIMEOUT)
    if pre:
        s.sendall(pre)
    theirs = recv_exact(s, 8)
    return s, theirs


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except socket.timeout:
            break
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    return buf


def check_listener_preamble(p):
    return (len(p) == 8 and p[:4] == MAGIC and 1 <= p[4] <= p[5] and p[6] <= 2
            and not (p[7] & 0xFE))


class SendTolerantSocket:
    """Wraps the TCP socket so that a failed send (the listener already closed
    after rejecting something mid-flight) is remembered instead of raised:
    tlslite-ng then goes on reading, and the listener's alert, if it sent
    one, is still seen."""

    def __init__(self, sock):
        self._s = sock
        self.send_error = None
        self.offered = {}            # extensions of the ClientHello we sent
        self.sent = b""              # the first bytes we sent (the ClientHello)

    def _keep(self, data):
        if len(self.sent) < 16384:
            self.sent += bytes(data)

    def __getattr__(self, name):
        return getattr(self._s, name)

    def send(self, data):
        self._keep(data)
        try:
            return self._s.send(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            self.send_error = self.send_error or type(e).__name__
            return len(data)

    def sendall(self, data):
        self._keep(data)
        try:
            return self._s.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            self.send_error = self.send_error or type(e).__name__
            return None


class RecordingTLSConnection(TLSConnection):
    """A tlslite-ng client connection that remembers the handshake messages."""

    def __init__(self, sock):
        super().__init__(sock)
        self.seen = []

    def _getMsg(self, expectedType, secondaryType=None, constructorType=None):
        for result in super()._getMsg(expectedType, secondaryType, constructorType):
            if result not in (0, 1):
                self.seen.append(result)
            yield result


def alert_name(desc):
    return AlertDescription.toStr(desc) if desc is not None else "?"


def group_name(g):
    try:
        return GroupName.toStr(g)
    except Exception:
        return "0x%04x" % g


def wait_readable(conn, timeout):
    """True when the TLS connection has buffered bytes or its socket becomes
    readable within timeout. (tlslite-ng shuts a connection down on any
    exception inside read(), a socket timeout included, so idle waits are
    done with select() instead.)"""
    if getattr(conn, "_readBuffer", b""):
        return True
    raw = conn.sock.socket if hasattr(conn.sock, "socket") else conn.sock
    r, _, _ = select.select([raw], [], [], timeout)
    return bool(r)


def read_frame(conn, timeout):
    """Read one §6 frame from the TLS connection: ('frame', type, payload),
    ('closed', how) or ('silent', None) when nothing came within timeout."""
    buf = b""
    need = 12
    try:
        while True:
            while len(buf) < need:
                if not wait_readable(conn, timeout if not buf else SOCK_TIMEOUT):
                    return ("silent", None) if not buf else ("closed", "partial frame")
                data = conn.read(max=need - len(buf), min=1)
                if not data:
                    return ("closed", "close_notify/EOF")
                buf += bytes(data)
            if need == 12:
                length = struct.unpack(">I", buf[8:12])[0]
                if length == 0 or length > 65536:
                    return ("frame", buf[0], b"")
                need = 12 + length
                continue
            return ("frame", buf[0], buf[12:need])
    except socket.timeout:
        return ("closed", "timeout inside a record")
    except TLSRemoteAlert as e:
        return ("closed", "alert " + alert_name(e.description))
    except TLSAbruptCloseError:
        return ("closed", "TCP close without close_notify")
    except (TLSError, OSError) as e:
        return ("closed", type(e).__name__)


def is_hello(obs):
    return obs[0] == "frame" and obs[1] == 0x01


def describe_frame(obs):
    if obs[0] != "frame":
        return obs[0] + (" (" + obs[1] + ")" if obs[1] else "")
    t, p = obs[1], obs[2]
    name = FRAME_NAMES.get(t, "type 0x%02x" % t)
    if t == 0x06 and len(p) == 2:
        return "GOODBYE %d" % struct.unpack(">H", p)[0]
    return name


class Result:
    def __init__(self):
        self.stage = None            # 'preamble', 'handshake', 'done'
        self.ok = False              # TLS handshake completed
        self.error = None            # why the handshake failed
        self.alert = None            # alert description received, if any
        self.version = self.cipher = self.group = self.alpn = None
        self.hrr = False
        self.cert_request = None
        self.tickets = 0
        self.server_leaf_sha256 = None
        self.server_chain_len = 0
        self.server_leaf = None
        self.passive = None          # first thing the listener sent after the handshake
        self.frames = []             # everything it sent on its own
        self.hello_purpose = None
        self.hello_echo_ok = None
        self.after_ping = None       # answer to PING before HELLO
        self.keyupdate_sent = False
        self.send_error = None
        self.offered = {}            # extensions of the ClientHello we sent

    def short(self):
        if not self.ok:
            return "refused at %s: %s" % (self.stage, self.error)
        bits = ["%s %s group=%s alpn=%s" % (self.version, self.cipher, self.group,
                                            self.alpn)]
        if self.hrr:
            bits.append("HRR")
        bits.append("certreq=%s tickets=%d" % ("yes" if self.cert_request else "no",
                                               self.tickets))
        if self.send_error:
            bits.append("our last flight hit %s (listener had closed)" % self.send_error)
        bits.append("then listener: " + ", ".join(describe_frame(f) for f in self.frames))
        if self.hello_purpose is not None:
            bits.append("HELLO purpose=%d echo=%s" % (self.hello_purpose,
                                                     "ok" if self.hello_echo_ok else "BAD"))
        if 0x0029 in self.offered:
            bits.append("we offered pre_shared_key")
        if self.keyupdate_sent:
            bits.append("KeyUpdate(update_requested) sent")
        if self.after_ping is not None:
            bits.append("PING before our HELLO -> " + describe_frame(self.after_ping))
        return "; ".join(bits)

    def channel_open(self):
        """Handshake done and the listener went on with MPCP: it sent its HELLO
        (purpose 0, correct preamble echo), waited for ours, and answered a
        premature PING with GOODBYE 1 (§7.1)."""
        return (self.ok and self.hello_purpose == 0 and self.hello_echo_ok
                and self.frames[-1][0] == "silent"
                and self.after_ping is not None and self.after_ping[0] == "frame"
                and self.after_ping[1] == 0x06 and self.after_ping[2] == b"\x00\x01")


def tls_attempt(port, identity=None, pre=None, min_version=(3, 4), max_version=(3, 4),
                ciphers=None, groups=("x25519", "secp256r1"), key_shares=("x25519",),
                alpn=(ALPN,), psk=None, ping=True, keyupdate=False):
    r = Result()
    r.stage = "preamble"
    try:
        r.our_pre = pre if pre is not None else preamble(1, identity is not None)
        sock, theirs = open_with_preamble(port, r.our_pre)
        r.their_pre = theirs
    except OSError as e:
        r.error = "connect: %s" % e
        return r
    if not check_listener_preamble(theirs):
        r.error = "listener preamble %r" % theirs.hex()
        sock.close()
        return r
    r.stage = "handshake"
    tolerant = SendTolerantSocket(sock)
    conn = RecordingTLSConnection(tolerant)
    s = HandshakeSettings()
    s.minVersion, s.maxVersion = min_version, max_version
    if max_version < (3, 4):
        s.versions = [v for v in [(3, 3), (3, 2), (3, 1)]
                      if min_version <= v <= max_version]
    if ciphers is not None:
        s.cipherNames = list(ciphers)
    ecc = [g for g in groups if not g.startswith("ffdhe")]
    dh = [g for g in groups if g.startswith("ffdhe")]
    s.eccCurves = ecc
    s.dhGroups = dh
    s.keyShares = list(key_shares)
    s.use_heartbeat_extension = False
    s.usePaddingExtension = False
    s.certificate_compression_send = []
    s.certificate_compression_receive = []
    s.record_size_limit = None
    if psk:
        s.pskConfigs = [psk]
    try:
        kwargs = dict(settings=s)
        if identity is not None:
            kwargs.update(certChain=identity.chain, privateKey=identity.key)
        if alpn:
            kwargs["alpn"] = [bytearray(a) for a in alpn]
        conn.handshakeClientCert(**kwargs)
    except TLSRemoteAlert as e:
        r.alert = alert_name(e.description)
        r.error = "alert %s from listener" % r.alert
    except TLSLocalAlert as e:
        r.error = "local alert %s (%s)" % (alert_name(e.description), e.message or "")
    except TLSAbruptCloseError:
        r.error = "TCP closed during handshake"
    except socket.timeout:
        r.error = "timeout during handshake"
    except (TLSError, OSError, AssertionError, ValueError) as e:
        r.error = "%s: %s" % (type(e).__name__, e)
    finally:
        for m in conn.seen:
            if isinstance(m, CertificateRequest):
                r.cert_request = True
            if isinstance(m, ServerHello):
                ks = m.getExtension(ExtensionType.key_share)
                if ks is not None and getattr(ks, "server_share", None) is not None:
                    r.group = group_name(ks.server_share.group)
                if ks is not None and getattr(ks, "selected_group", None) is not None:
                    r.hrr = True
        if r.cert_request is None:
            r.cert_request = False
    if r.error:
        r.offered = client_hello_extensions(tolerant.sent)
        sock.close()
        return r
    r.ok = True
    r.stage = "done"
    r.version = conn.getVersionName()
    r.cipher = CipherSuite.ietfNames.get(conn.session.cipherSuite,
                                         hex(conn.session.cipherSuite))
    r.alpn = bytes(conn.session.appProto).decode() if conn.session.appProto else None
    chain = conn.session.serverCertChain
    if chain and chain.x509List:
        r.server_chain_len = len(chain.x509List)
        der = bytes(chain.x509List[0].bytes)
        r.server_leaf_sha256 = hashlib.sha256(der).digest()
        r.server_leaf = x509.load_der_x509_certificate(der)
    # §6.4.1: HELLO is "sent once by each side, first thing after the TLS
    # handshake", so the listener speaks first; then it waits for ours.
    r.frames = []
    wait = 2.0
    for _ in range(3):
        obs = read_frame(conn, wait)
        r.frames.append(obs)
        if obs[0] != "frame":
            break
        wait = 0.5
    r.passive = r.frames[0]
    hello = r.passive
    if hello[0] == "frame" and hello[1] == 0x01 and len(hello[2]) >= 20:
        r.hello_purpose = hello[2][1]
        r.hello_echo_ok = hello[2][4:20] == r.our_pre + r.their_pre
    if r.frames[-1][0] == "silent" and ping:
        try:
            if keyupdate:
                from tlslite.constants import KeyUpdateMessageType
                for _ in conn.send_keyupdate_request(
                        KeyUpdateMessageType.update_requested):
                    pass
                r.keyupdate_sent = True
            conn.write(PING)
            r.after_ping = read_frame(conn, 3.0)
        except (TLSError, OSError) as e:
            r.after_ping = ("closed", type(e).__name__)
    r.tickets = len(conn.tickets)
    r.send_error = tolerant.send_error
    r.offered = client_hello_extensions(tolerant.sent)
    try:
        conn.sock.close()
    except OSError:
        pass
    return r


# ---------------------------------------------------------------- raw ClientHello

def raw_client_hello(compression=b"\x00", suites=(0x1301, 0x1302, 0x1303),
                     alpn=ALPN):
    """A minimal TLS 1.3 ClientHello built by hand (RFC 8446 §4.1.2)."""
    pub = x25519.X25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def ext(t, body):
        return struct.pack(">HH", t, len(body)) + body
    exts = b""
    exts += ext(0x002b, b"\x02\x03\x04")                         # supported_versions
    exts += ext(0x000a, b"\x00\x04\x00\x1d\x00\x17")              # x25519, secp256r1
    share = b"\x00\x1d" + struct.pack(">H", 32) + pub
    exts += ext(0x0033, struct.pack(">H", len(share)) + share)    # key_share
    sigs = b"".join(struct.pack(">H", x) for x in
                    (0x0807, 0x0403, 0x0804, 0x0805, 0x0806, 0x0503, 0x0401))
    exts += ext(0x000d, struct.pack(">H", len(sigs)) + sigs)      # signature_algorithms
    if alpn:
        lst = bytes([len(alpn)]) + alpn
        exts += ext(0x0010, struct.pack(">H", len(lst)) + lst)    # ALPN
    cs = b"".join(struct.pack(">H", x) for x in suites)
    body = (b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32)
            + struct.pack(">H", len(cs)) + cs
            + bytes([len(compression)]) + compression
            + struct.pack(">H", len(exts)) + exts)
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def client_hello_extensions(data):
    """Extension types of the first ClientHello in data (TLS records)."""
    try:
        if data[0] != 22 or data[5] != 1:
            return set()
        body = data[9:5 + struct.unpack(">H", data[3:5])[0]]
        p = 2 + 32
        p += 1 + body[p]
        p += 2 + struct.unpack(">H", body[p:p + 2])[0]
        p += 1 + body[p]
        end = p + 2 + struct.unpack(">H", body[p:p + 2])[0]
        p += 2
        exts = {}
        while p < end:
            t, l = struct.unpack(">HH", body[p:p + 4])
            exts[t] = body[p + 4:p + 4 + l]
            p += 4 + l
        return exts
    except (IndexError, struct.error):
        return {}


def offered_groups(r):
    """Names in the supported_groups extension we actually sent."""
    d = r.offered.get(0x000a, b"")
    return [group_name(struct.unpack(">H", d[i:i + 2])[0]) for i in range(2, len(d), 2)]


HRR_RANDOM = bytes.fromhex(
    "CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")


def first_record(sock):
    """Read the listener's first TLS record: ('alert', name), ('serverhello',
    exts dict), ('hrr', exts), ('other', ...) or ('closed', '')."""
    hdr = recv_exact(sock, 5)
    if len(hdr) < 5:
        return ("closed", "EOF after %d bytes" % len(hdr))
    ctype, _, length = hdr[0], hdr[1:3], struct.unpack(">H", hdr[3:5])[0]
    body = recv_exact(sock, length)
    if ctype == 21 and len(body) >= 2:
        return ("alert", alert_name(body[1]))
    if ctype == 22 and body[:1] == b"\x02":
        p = 4 + 2
        rnd = body[p:p + 32]; p += 32
        sid_len = body[p]; p += 1 + sid_len
        suite = struct.unpack(">H", body[p:p + 2])[0]; p += 2
        comp = body[p]; p += 1
        elen = struct.unpack(">H", body[p:p + 2])[0]; p += 2
        exts = {}
        end = p + elen
        while p < end:
            t, l = struct.unpack(">HH", body[p:p + 4]); p += 4
            exts[t] = body[p:p + l]; p += l
        exts["suite"] = suite
        exts["compression"] = comp
        return ("hrr" if rnd == HRR_RANDOM else "serverhello", exts)
    return ("other", "content type %d" % ctype)


def raw_attempt(port, hello, pre=None):
    try:
        sock, theirs = open_with_preamble(port, pre if pre is not None else preamble(1, True))
    except OSError as e:
        return ("error", str(e))
    try:
        if not check_listener_preamble(theirs):
            return ("error", "listener preamble %r" % theirs.hex())
        sock.sendall(hello)
        return first_record(sock)
    except OSError as e:
        return ("closed", type(e).__name__)
    finally:
        sock.close()


def raw_send_until_closed(port, data):
    """Sends `data` with no preamble first, then reads until the listener closes."""
    try:
        sock = socket.create_connection((HOST, port), timeout=SOCK_TIMEOUT)
    except OSError as e:
        return "error %s" % e
    got = b""
    try:
        sock.sendall(data)
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return "closed EOF after %d bytes" % len(got)
            got += chunk
    except OSError as e:
        return "closed %s after %d bytes" % (type(e).__name__, len(got))
    finally:
        sock.close()


# ---------------------------------------------------------------- probes

class Runner:
    def __init__(self):
        self.rows = []   # (name, expected, observed, outcome)

    def report(self, name, passed, expected, observed):
        outcome = "PASS" if passed else "FAIL"
        self.rows.append((name, expected, observed, outcome))
        print("%s %s %s" % (name, outcome, observed), flush=True)

    def out_of_time(self):
        return time.monotonic() - T0 > RUN_BUDGET


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connection-data", required=True,
                    help="the listener's connection data, hex (§9.3)")
    ap.add_argument("--certs", default=os.path.join(os.path.dirname(__file__),
                                                    "..", "..", "Certificates", "peers"))
    ap.add_argument("--password-file", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "Certificates", "password.txt"))
    ap.add_argument("--table", help="also write the results as a Markdown table here")
    args = ap.parse_args()

    def on_alarm(signum, frame):
        print("run-time-limit FAIL the run exceeded %d s" % HARD_LIMIT, flush=True)
        os._exit(1)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HARD_LIMIT)

    try:
        cd = parse_connection_data(bytes.fromhex(args.connection_data))
    except ValueError as e:
        print("bad connection data: %s" % e, file=sys.stderr)
        return 2
    ports = [p for fam, a, p in cd["endpoints"] if fam == 4 and a == b"\x7f\x00\x00\x01"]
    if not ports:
        print("connection data has no 127.0.0.1 endpoint", file=sys.stderr)
        return 2
    port = ports[0]
    with open(args.password_file, "rb") as f:
        password = f.readline().rstrip(b"\r\n")
    ids = {n: load_identity(args.certs, n, password)
           for n in ("bob", "alice", "carol", "expired")}
    weak = make_rsa_identity(1024)
    strong = make_rsa_identity(2048)
    bob = ids["bob"]
    print("# listener 127.0.0.1:%d preference=%d hasIdentity=%s fingerprint=%s"
          % (port, cd["pref"], cd["has_identity"], cd["fingerprint"].hex() or "-"),
          flush=True)

    run = Runner()

    def accepted_probe(name, expected, check=None, **kw):
        if run.out_of_time():
            run.report(name, False, expected, "skipped: run budget exhausted")
            return None
        r = tls_attempt(port, **kw)
        ok = r.channel_open() and (check is None or check(r))
        run.report(name, ok, expected, r.short())
        return r

    def refused_probe(name, expected, check=None, **kw):
        """PASS when the handshake fails, or the listener closes the channel on
        its own right after it (without waiting for our HELLO)."""
        if run.out_of_time():
            run.report(name, False, expected, "skipped: run budget exhausted")
            return None
        kw.setdefault("ping", True)
        r = tls_attempt(port, **kw)
        ok = (not r.ok) or (r.passive is not None and not is_hello(r.passive))
        if kw.get("alpn", (ALPN,)) is None:
            ok = ok and 0x0010 not in r.offered      # really sent without ALPN
        if check is not None:
            ok = ok and check(r)
        run.report(name, ok, expected, r.short())
        return r

    # 1. The full, valid handshake.
    def main_check(r):
        return (r.version == "TLS 1.3" and r.alpn == "mpcp/1" and r.group == "x25519"
                and r.cipher in SPEC_SUITES and r.cert_request and r.tickets == 0
                and (not cd["has_identity"] or r.server_leaf_sha256 == cd["fingerprint"]))
    r = accepted_probe("handshake-valid",
                       "TLS 1.3, spec suite, x25519, ALPN mpcp/1, CertificateRequest, "
                       "no ticket, leaf = connection-data fingerprint, channel open",
                       main_check, identity=bob)
    if r is not None and r.ok:
        print("# negotiated: version=%s suite=%s group=%s alpn=%s certificate_request=%s "
              "new_session_tickets=%d server_chain=%d leaf_sha256=%s (connection data: %s)"
              % (r.version, r.cipher, r.group, r.alpn, r.cert_request, r.tickets,
                 r.server_chain_len, r.server_leaf_sha256.hex() if r.server_leaf_sha256
                 else "-", cd["fingerprint"].hex() or "-"), flush=True)

    if r is not None and r.ok:
        if cd["has_identity"]:
            ok = r.server_leaf_sha256 == cd["fingerprint"] and r.server_chain_len >= 2
            run.report("server-certificate", ok,
                       "leaf = connection-data fingerprint, intermediates after it (§5)",
                       "chain of %d, leaf sha256 %s" % (r.server_chain_len,
                                                       "matches" if r.server_leaf_sha256 == cd["fingerprint"] else "DIFFERS"))
        else:
            leaf = r.server_leaf
            selfsigned = leaf is not None and leaf.issuer == leaf.subject
            r2 = tls_attempt(port, identity=bob, ping=False)
            fresh = r2.ok and r2.server_leaf_sha256 != r.server_leaf_sha256
            run.report("server-certificate", r.server_chain_len == 1 and selfsigned,
                       "one ephemeral self-signed certificate (§5, listener without identity)",
                       "chain of %d, self-signed=%s, subject=%s, new certificate on next "
                       "connection=%s" % (r.server_chain_len, selfsigned,
                                          leaf.subject.rfc4514_string() if leaf else "-", fresh))

    # 2. Versions.
    refused_probe("tls12-only", "refused (§5: only TLS 1.3)", identity=bob,
                  min_version=(3, 3), max_version=(3, 3),
                  ciphers=["aes128gcm", "aes256gcm", "chacha20-poly1305"])
    refused_probe("tls10-11-only", "refused", identity=bob,
                  min_version=(3, 1), max_version=(3, 2),
                  ciphers=["aes128", "aes256"])

    # 3. ALPN.
    refused_probe("alpn-absent", "closed (§5: server MUST select mpcp/1)",
                  identity=bob, alpn=None)
    refused_probe("alpn-wrong-mpcp2", "closed", identity=bob, alpn=(b"mpcp/2",))
    refused_probe("alpn-wrong-http11", "closed", identity=bob, alpn=(b"http/1.1",))
    accepted_probe("alpn-extra-h2-then-mpcp1", "accepted, mpcp/1 selected",
                   lambda r: r.alpn == "mpcp/1", identity=bob,
                   alpn=(b"h2", b"mpcp/1"))

    # 4. Cipher suites, one at a time.
    SUITE_NAMES = {"aes128gcm": "TLS_AES_128_GCM_SHA256",
                   "aes256gcm": "TLS_AES_256_GCM_SHA384",
                   "chacha20-poly1305": "TLS_CHACHA20_POLY1305_SHA256",
                   "aes128ccm": "TLS_AES_128_CCM_SHA256",
                   "aes128ccm_8": "TLS_AES_128_CCM_8_SHA256"}
    for tl, iana in SUITE_NAMES.items():
        if iana in SPEC_SUITES:
            accepted_probe("suite-" + iana, "accepted", lambda r, i=iana: r.cipher == i,
                           identity=bob, ciphers=[tl])
        else:
            refused_probe("suite-" + iana, "refused (not in §5)", identity=bob,
                          ciphers=[tl])

    # 5. Groups, one at a time (supported_groups and key_share = that group).
    for g in ("x25519", "secp256r1", "x448", "secp384r1", "secp521r1",
              "brainpoolP256r1tls13", "ffdhe2048", "ffdhe3072", "ffdhe4096",
              "ffdhe6144", "ffdhe8192"):
        if g in SPEC_GROUPS:
            accepted_probe("group-" + g, "accepted",
                           lambda r, g=g: r.group == g and offered_groups(r) == [g],
                           identity=bob, groups=(g,), key_shares=(g,))
        else:
            refused_probe("group-" + g, "refused (§5: x25519, secp256r1 only)",
                          lambda r, g=g: offered_groups(r) == [g],
                          identity=bob, groups=(g,), key_shares=(g,))
    accepted_probe("group-hrr-secp384r1-to-secp256r1",
                   "HelloRetryRequest to secp256r1, accepted",
                   lambda r: r.group == "secp256r1" and r.hrr, identity=bob,
                   groups=("secp384r1", "secp256r1"), key_shares=("secp384r1",))
    r = accepted_probe("group-no-keyshare-server-choice",
                       "HRR; the listener picks x25519 (§5 preference order)",
                       lambda r: r.group == "x25519", identity=bob,
                       groups=("secp256r1", "x25519"), key_shares=())

    # 6. Client certificates (§5 + identity presence check).
    accepted_probe("client-cert-absent-flag-clear",
                   "accepted: CertificateRequest answered with an empty Certificate",
                   lambda r: r.cert_request, identity=None,
                   pre=preamble(1, has_identity=False))
    r = refused_probe("client-cert-absent-flag-set",
                      "handshake, then GOODBYE 4 (downgradeDetected) and close",
                      identity=None, pre=preamble(1, has_identity=True))
    if r is not None:
        ok = r.ok and any(f[0] == "frame" and f[1] == 0x06 and f[2] == b"\x00\x04"
                          for f in r.frames) and r.frames[-1][0] == "closed"
        fix_last(run, ok)
    r = refused_probe("client-cert-present-flag-clear",
                      "handshake, then GOODBYE 4 (downgradeDetected) and close",
                      identity=bob, pre=preamble(1, has_identity=False))
    if r is not None:
        ok = r.ok and any(f[0] == "frame" and f[1] == 0x06 and f[2] == b"\x00\x04"
                          for f in r.frames) and r.frames[-1][0] == "closed"
        fix_last(run, ok)
    accepted_probe("client-cert-ed25519-alice", "accepted", identity=ids["alice"])
    accepted_probe("client-cert-rsa3072-carol", "accepted", identity=ids["carol"])
    accepted_probe("client-cert-expired",
                   "accepted by TLS (chain validity is the trust step's, §5)",
                   identity=ids["expired"])
    refused_probe("client-cert-rsa1024", "refused (§5: security level 2)",
                  identity=weak)
    accepted_probe("client-cert-rsa2048-selfsigned",
                   "accepted (control for the RSA-1024 probe: same generator, 2048 bits)",
                   identity=strong)

    accepted_probe("keyupdate-from-client",
                   "listener follows our KeyUpdate(update_requested): PING under the new "
                   "key still answered with GOODBYE 1 (RFC 8446 §4.6.3, §5)",
                   lambda r: r.keyupdate_sent, identity=bob, keyupdate=True)

    # 7. Compression (hand-built ClientHello).
    if not run.out_of_time():
        obs = raw_attempt(port, raw_client_hello(b"\x00"))
        run.report("raw-clienthello-baseline", obs[0] == "serverhello",
                   "ServerHello (sanity check of the hand-built ClientHello)",
                   "%s %s" % (obs[0], describe_sh(obs)))
        obs = raw_attempt(port, raw_client_hello(b"\x01\x00"))
        run.report("compression-deflate-offered", obs[0] in ("alert", "closed"),
                   "refused: illegal_parameter (RFC 8446 §4.1.2)",
                   "%s %s" % (obs[0], describe_sh(obs)))
        obs = raw_attempt(port, raw_client_hello(b"\x01"))
        run.report("compression-deflate-only", obs[0] in ("alert", "closed"),
                   "refused", "%s %s" % (obs[0], describe_sh(obs)))

    # 8. Resumption: PSK offered -> full handshake; tickets -> none.
    accepted_probe("psk-offered-full-handshake",
                   "full handshake with certificates (§5: no PSK recognised)",
                   lambda r: r.server_chain_len > 0 and r.cert_request
                   and 0x0029 in r.offered,
                   identity=bob,
                   psk=(bytearray(b"unknown-psk-identity"), bytearray(32), "sha256"))
    # Tickets are counted on every handshake above that completed.
    total = sum(1 for row in run.rows if "tickets=" in row[2])
    with_tickets = [row[0] for row in run.rows
                    if "tickets=" in row[2] and "tickets=0" not in row[2]]
    run.report("no-session-tickets", not with_tickets,
               "no NewSessionTicket on any handshake (§5)",
               "%d handshakes, tickets on: %s" % (total, ", ".join(with_tickets) or "none"))

    # 9. Preamble (§3/§4) edges, plain TCP.
    if not run.out_of_time():
        obs = raw_attempt_no_tls(port, preamble(2, has_identity=False))
        run.report("preamble-none-vs-required", obs == "closed",
                   "listener closes after preambles, sends nothing (§4 rule 1)", obs)
        obs = raw_send_until_closed(port, raw_client_hello())
        run.report("no-preamble-clienthello-first",
                   obs == "closed EOF after 0 bytes", "closed, nothing sent (§3 bad magic; no listener preamble)", obs)

    # Summary.
    fails = [r for r in run.rows if r[3] == "FAIL"]
    print("SUMMARY %d probes, %d PASS, %d FAIL, %.1f s" %
          (len(run.rows), len(run.rows) - len(fails), len(fails), time.monotonic() - T0))
    if args.table:
        with open(args.table, "w") as f:
            f.write("| probe | expected | observed | outcome |\n|---|---|---|---|\n")
            for n, e, o, out in run.rows:
                f.write("| %s | %s | %s | %s |\n" % (n, e, o.replace("|", "/"), out))
    return 1 if fails else 0


SPEC_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
               "TLS_CHACHA20_POLY1305_SHA256")
SPEC_GROUPS = ("x25519", "secp256r1")


def fix_last(run, ok):
    n, e, o, _ = run.rows[-1]
    run.rows[-1] = (n, e, o, "PASS" if ok else "FAIL")
    if not ok:
        print("%s FAIL (re-judged: expected GOODBYE 4 after the handshake)" % n, flush=True)


def describe_sh(obs):
    if obs[0] in ("serverhello", "hrr"):
        e = obs[1]
        bits = ["suite=%s" % CipherSuite.ietfNames.get(e["suite"], hex(e["suite"])),
                "compression=%d" % e["compression"]]
        if 0x0033 in e and len(e[0x0033]) >= 2:
            bits.append("group=%s" % group_name(struct.unpack(">H", e[0x0033][:2])[0]))
        if 0x0029 in e:
            bits.append("pre_shared_key selected")
        return " ".join(bits)
    return obs[1] if len(obs) > 1 else ""


def raw_attempt_no_tls(port, pre):
    try:
        sock, theirs = open_with_preamble(port, pre)
    except OSError as e:
        return "error %s" % e
    try:
        if not check_listener_preamble(theirs):
            return "listener preamble %r" % theirs.hex()
        sock.settimeout(3.0)
        try:
            more = sock.recv(1)
        except socket.timeout:
            return "open (no close within 3 s)"
        except OSError:
            return "closed"
        return "closed" if not more else "sent more bytes: %r" % more
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
