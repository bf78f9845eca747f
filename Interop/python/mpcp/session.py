"""A session: one peer ID, a TCP listener, a UDP socket, its connections, and
the application's side (trust decisions, tokens, events)."""
import os
import select
import socket
import threading
import time

from . import datagram as D
from . import frames as F
from .connection import Connection
from .connection_data import ConnectionData
from .encodings import PeerID, Endpoint
from .events import EventLog
from .preamble import PREFERENCE_NAMES, TLS
from .tls import Identity, verify_chain

TOKEN_LIFETIME = 120.0


class Session:
    def __init__(self, name="python", preference="required", identity: Identity = None,
                 trust="accept", keepalive=2.0, dead_peer=9.0, handshake_deadline=10.0,
                 trust_timeout=30.0, datagrams=True, listen=True, datagrams_per_epoch=2 ** 32):
        # §8: a sender moves to epoch E+1 before its counter in E reaches 2^32;
        # a smaller count makes the sender change epochs within a few datagrams.
        self.datagrams_per_epoch = datagrams_per_epoch
        self.peer_id = PeerID.new(name)
        self.preference = PREFERENCE_NAMES[preference] if isinstance(preference, str) else preference
        self.identity = identity
        self.trust = trust
        self.keepalive = keepalive
        self.dead_peer = dead_peer
        self.handshake_deadline = handshake_deadline
        self.trust_timeout = trust_timeout
        self.events = EventLog()
        self.hooks = {}                 # test hooks: "preamble" bytes, "hello" fn
        self.keep_channel_data = True
        self.refuse_resources = False
        self.refuse_streams = False
        self.tokens = {}                # token -> (for identifier, expiry)
        self.lock = threading.Lock()
        self.connections = []
        self.by_rid = {}
        self.introductions = {}         # introduced identifier -> (introducer identifier, expiry)
        self.mesh = True
        self.closing = threading.Event()
        self.listen_sock = None
        self.listen_port = 0
        self.udp = None
        self.udp_port = 0
        if listen:
            self.listen_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listen_sock.bind(("127.0.0.1", 0))
            self.listen_sock.listen(16)
            self.listen_port = self.listen_sock.getsockname()[1]
            threading.Thread(target=self._accept_loop, daemon=True, name="mpcp-accept").start()
        if datagrams:
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind(("127.0.0.1", 0))
            self.udp_port = self.udp.getsockname()[1]
            threading.Thread(target=self._udp_loop, daemon=True, name="mpcp-udp").start()

    # ---------------------------------------------------------- trust
    def trust_decision(self, conn, chain, code) -> bool:
        t = self.trust
        if callable(t):
            return bool(t(conn, chain, code))
        if t == "accept":
            return True
        if t == "reject":
            return False
        if isinstance(t, str) and t.startswith("ca:"):
            return verify_chain(chain, t[3:])
        raise ValueError("trust policy %r" % (t,))

    # ------------------------------------------------ connection data
    def make_connection_data(self, for_peer) -> bytes:
        ident = for_peer.identifier if isinstance(for_peer, PeerID) else for_peer
        token = os.urandom(16)
        with self.lock:
            self.tokens[token] = (ident, time.monotonic() + TOKEN_LIFETIME)
        return ConnectionData(self.preference, token, ident, self.peer_id,
                              self.identity.fingerprint if self.identity else None,
                              [Endpoint("127.0.0.1", self.listen_port)]).encode()

    def redeem_token(self, token, dialer_ident) -> bool:
        """§9.3: a token is good for 120 s, from the named peer only, once."""
        with self.lock:
            entry = self.tokens.get(token)
            if entry is None or entry[0] != dialer_ident or entry[1] < time.monotonic():
                return False
            del self.tokens[token]
            return True

    # ----------------------------------------------------- connecting
    def connect(self, data: bytes, timeout=5.0) -> Connection:
        cd = ConnectionData.decode(data)
        if cd.for_peer != self.peer_id.identifier:
            raise ValueError("connection data was made for another peer")
        eps = [e for e in cd.endpoints if not e.is_link_local]
        last = None
        for ep in eps:
            fam = socket.AF_INET6 if ":" in ep.host else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect((ep.host, ep.port))
            except OSError as e:
                s.close()
                last = e
                continue
            conn = Connection(self, s, dialer=True, data=cd)
            with self.lock:
                self.connections.append(conn)
            conn.start()
            return conn
        raise ConnectionError("no endpoint answered: %s" % last)

    def _accept_loop(self):
        while not self.closing.is_set():
            r, _, _ = select.select([self.listen_sock], [], [], 0.2)
            if not r:
                continue
            try:
                s, _ = self.listen_sock.accept()
            except OSError:
                continue
            conn = Connection(self, s, dialer=False)
            with self.lock:
                self.connections.append(conn)
            conn.start()

    def other_connections(self, ident, other_than):
        with self.lock:
            return [c for c in self.connections if c is not other_than and not c.closed.is_set()
                    and c.peer_id is not None and c.peer_id.identifier == ident]

    def has_connected(self, ident, other_than) -> bool:
        with self.lock:
            return any(c is not other_than and c.connected and not c.closed.is_set()
                       and c.peer_id and c.peer_id.identifier == ident for c in self.connections)

    def _register_connected(self, conn):
        with self.lock:
            self.by_rid[conn.my_rid] = conn
            others = [c for c in self.connections if c is not conn and c.connected and not c.closed.is_set()]
        if self.mesh and others and conn.purpose != F.PURPOSE_MESH and conn.peer_hello.purpose != F.PURPOSE_MESH:
            self._introduce(conn, others)

    # ---------------------------------------------------------- mesh (§7.4)
    def _entry(self, c):
        return (c.peer_id, Endpoint(c.peer_addr, c.peer_hello.listen_port))

    def _introduce(self, newcomer, others):
        newcomer.enqueue(F.frame(F.MESH_INTRODUCTION,
                                 F.MeshIntroduction([self._entry(c) for c in others[:6]]).encode_payload()))
        for c in others:
            c.enqueue(F.frame(F.MESH_INTRODUCTION, F.MeshIntroduction([self._entry(newcomer)]).encode_payload()))

    def on_introduction(self, introducer, entries):
        for pid, ep in entries:
            if pid.identifier == self.peer_id.identifier:
                continue
            with self.lock:
                self.introductions[pid.identifier] = (introducer.peer_id.identifier, time.monotonic() + 60)
            they_listen, we_listen = ep.port != 0, self.listen_port != 0
            if they_listen and we_listen:
                we_dial = self.peer_id.identifier > pid.identifier
            else:
                we_dial = they_listen and not we_listen
            if we_dial and self.connection_to(pid.identifier) is None:
                threading.Thread(target=self._dial_introduced, args=(introducer.peer_id, pid, ep),
                                 daemon=True).start()

    def dial(self, ep, purpose, token, expected=None):
        """Dial an endpoint with a HELLO purpose and token of our choosing."""
        s = socket.socket(socket.AF_INET6 if ":" in ep.host else socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect((ep.host, ep.port))
        except OSError:
            s.close()
            return None
        conn = Connection(self, s, dialer=True, purpose=purpose, token=token, expected=expected)
        with self.lock:
            self.connections.append(conn)
        conn.start()
        return conn

    def _dial_introduced(self, introducer, pid, ep):
        for attempt in range(4):
            mark = self.events.mark()
            conn = self.dial(ep, F.PURPOSE_MESH, introducer.identifier, expected=pid)
            if conn is None:
                return
            conn.closed.wait(self.handshake_deadline + self.trust_timeout)
            if conn.connected or self.connection_to(pid.identifier):
                return
            bye = self.events.all(lambda e: e.kind == "goodbye" and e.data.get("conn") is conn, since=mark)
            if not bye or bye[0].data["reason"] != 9:
                return
            time.sleep(0.25)

    def admit_introduced(self, introducer_ident, dialer_ident) -> bool:
        with self.lock:
            entry = self.introductions.get(dialer_ident)
            ok = (entry is not None and entry[0] == introducer_ident and entry[1] >= time.monotonic()
                  and any(c.connected and c.peer_id.identifier == introducer_ident for c in self.connections))
            if ok:
                del self.introductions[dialer_ident]
            return ok

    def _forget(self, conn):
        with self.lock:
            if conn in self.connections:
                self.connections.remove(conn)
            if self.by_rid.get(conn.my_rid) is conn:
                del self.by_rid[conn.my_rid]

    def connection_to(self, ident) -> Connection:
        with self.lock:
            for c in self.connections:
                if c.connected and c.peer_id and c.peer_id.identifier == ident and not c.closed.is_set():
                    return c
        return None

    # ------------------------------------------------------ datagrams
    def seal_datagram(self, conn, payload: bytes, epoch=None, counter=None) -> bytes:
        """The exact UDP payload for `payload` to `conn`'s peer (next counter
        unless given)."""
        with conn.dgram_lock:
            if epoch is None and counter is None and conn.send_counter >= self.datagrams_per_epoch:
                conn.send_epoch += 1            # next epoch, its counter from 0 (§8)
                conn.send_counter = 0
            e = conn.send_epoch if epoch is None else epoch
            if counter is None:
                counter = conn.send_counter
                conn.send_counter += 1
        rid = conn.peer_hello.datagram_receiver_id
        if conn.outcome == TLS:
            return D.seal(conn.send_key(e), rid, e, counter, payload)
        return D.plain(rid, e, counter, payload)

    def send_datagram(self, conn, payload: bytes):
        self.udp_send_raw(conn, self.seal_datagram(conn, payload))

    def udp_send_raw(self, conn, raw: bytes):
        self.udp.sendto(raw, conn.peer_udp)

    def _udp_loop(self):
        while not self.closing.is_set():
            r, _, _ = select.select([self.udp], [], [], 0.2)
            if not r:
                continue
            try:
                data, addr = self.udp.recvfrom(65535)
            except OSError:
                continue
            self._on_datagram(data, addr)

    def _on_datagram(self, data, addr):
        h = D.DatagramHeader.decode(data)
        if h is None:
            return self.events.post("datagram-dropped", why="malformed")
        with self.lock:
            conn = self.by_rid.get(h.receiver_id)
        if conn is None:
            return self.events.post("datagram-dropped", why="unknown receiver")
        sealed = conn.outcome == TLS
        if (h.kind == D.KIND_SEALED) != sealed:
            return self.events.post("datagram-dropped", conn.peer_id, why="kind")
        if not sealed and addr[0] != conn.peer_addr:
            return self.events.post("datagram-dropped", conn.peer_id, why="source")
        if "udp_drop" in self.hooks and self.hooks["udp_drop"](conn, h):
            return self.events.post("datagram-dropped", conn.peer_id, why="simulated loss", epoch=h.epoch)
        with conn.dgram_lock:
            status, msg = conn.rx.receive(h, data)
        if status == "limit":
            conn.abort(6, "2^32 failed datagram openings in one epoch (§8)")
        if status != "ok":
            return self.events.post("datagram-dropped", conn.peer_id, why=status, epoch=h.epoch)
        self.events.post("datagram", conn.peer_id, conn=conn, payload=msg, epoch=h.epoch, counter=h.counter,
                         source=addr)

    # ---------------------------------------------------------- close
    def close(self):
        self.closing.set()
        with self.lock:
            conns = list(self.connections)
        for c in conns:
            c.disconnect(0)
        for s in (self.listen_sock, self.udp):
            if s is not None:
                s.close()
