"""§12 discovery with python-zeroconf: publish an advertiser's records
(§12.1, TXT of §12.2) and browse for others.

Multicast DNS must only ever run inside a network namespace the caller made
for it (the project's scripts give such a namespace's `lo` multicast);
`zeroconf_on_loopback` refuses to start otherwise."""
import os
import re
import threading
import time

SERVICE_RE = re.compile(r"^(?=.*[a-z])[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$|^[a-z]$")


def check_service(service: str):
    """§12.1: 1-15 characters, lowercase letters, digits and hyphens, at
    least one letter, no hyphen first, last or next to another."""
    if not (1 <= len(service) <= 15) or not SERVICE_RE.match(service):
        raise ValueError("bad service type %r" % service)


def service_type(service: str) -> str:
    return "_%s._tcp.local." % service


def instance_name(identifier: bytes, service: str) -> str:
    return "%s.%s" % (identifier.hex(), service_type(service))


def host_name(identifier: bytes, service: str) -> str:
    return "mpc-%s-%s.local." % (identifier.hex(), service)


def txt_strings(peer_id, discovery_info=None):
    """§12.2, in this order: txtvers, mpcid, mpcdn, then the application's keys."""
    out = [b"txtvers=1", b"mpcid=" + peer_id.identifier.hex().encode(),
           b"mpcdn=" + peer_id.display_name.encode("utf-8")]
    for k, v in (discovery_info or {}).items():
        if not k or "=" in k or k in ("txtvers", "mpcid", "mpcdn") or \
                any(not (0x20 < ord(c) < 0x7f) for c in k):
            raise ValueError("bad discoveryInfo key %r" % k)
        out.append(k.encode() + b"=" + v.encode("utf-8"))
    for s in out:
        if len(s) > 255:
            raise ValueError("TXT string over 255 bytes")
    return out


def encode_txt(strings) -> bytes:
    data = b"".join(bytes([len(s)]) + s for s in strings)
    if len(data) > 1300:
        raise ValueError("TXT data over 1,300 bytes")
    return data


def decode_txt(data: bytes):
    out, i = [], 0
    while i < len(data):
        n = data[i]
        out.append(data[i + 1:i + 1 + n])
        i += 1 + n
    return out


def parse_txt(strings, own_identifier=None):
    """§12.2 browser rules: (identifier hex, display name, discoveryInfo) or
    None when the instance must not be reported."""
    keys = {}
    for s in strings:
        if b"=" not in s:
            continue
        k, v = s.split(b"=", 1)
        keys.setdefault(k, v)             # repeated keys: the first counts
    mpcid, mpcdn = keys.get(b"mpcid"), keys.get(b"mpcdn")
    if mpcid is None or not re.fullmatch(rb"[0-9a-f]{32}", mpcid):
        return None
    if own_identifier is not None and mpcid.decode() == own_identifier.hex():
        return None
    try:
        name = mpcdn.decode("utf-8") if mpcdn is not None else None
    except UnicodeDecodeError:
        return None
    if name is None or not (1 <= len(mpcdn) <= 63):
        return None
    info = {k.decode("ascii", "replace"): v.decode("utf-8", "replace") for k, v in keys.items()
            if k not in (b"txtvers", b"mpcid", b"mpcdn")}
    return mpcid.decode(), name, info


def in_own_namespace() -> bool:
    """True when this process's network namespace has no interface but `lo`
    (a namespace made for the run: multicast cannot leave it)."""
    import socket
    try:
        return [name for _, name in socket.if_nameindex()] == ["lo"]
    except OSError:
        return False


def zeroconf_on_loopback():
    """A Zeroconf instance on 127.0.0.1 only (IPv4), refused unless the run
    was told multicast is allowed (INTEROP_MULTICAST=1) and this process's
    network namespace has only `lo`."""
    if os.environ.get("INTEROP_MULTICAST") != "1" or not in_own_namespace():
        raise RuntimeError("multicast DNS only inside a network namespace made for it (INTEROP_MULTICAST=1)")
    from zeroconf import Zeroconf, IPVersion
    return Zeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)


class Advertisement:
    """§12.1: PTR, SRV (target mpc-<hex>-<T>.local., the listener's port), TXT
    (§12.2), A; TTLs 4,500 s (PTR, TXT) and 120 s (SRV, A)."""

    def __init__(self, zc, service, peer_id, port, addresses=("127.0.0.1",), discovery_info=None):
        from zeroconf import ServiceInfo
        check_service(service)
        self.zc = zc
        self.strings = txt_strings(peer_id, discovery_info)
        self.info = ServiceInfo(service_type(service), instance_name(peer_id.identifier, service),
                                port=port, weight=0, priority=0, properties=encode_txt(self.strings),
                                server=host_name(peer_id.identifier, service), host_ttl=120, other_ttl=4500,
                                parsed_addresses=list(addresses))
        self.published = False

    def publish(self):
        self.zc.register_service(self.info, allow_name_change=True)   # probes, then announces
        self.published = True

    def withdraw(self):
        if self.published:
            self.zc.unregister_service(self.info)                      # goodbye: TTL 0
            self.published = False


class Browser:
    """Browses `_T._tcp.local.`, resolves each instance (SRV, TXT, A) and
    posts `found` (peer identifier hex, name, [(ip, port)], TXT strings, the
    resolved ServiceInfo) and `lost` events on `events`."""

    def __init__(self, zc, service, events, own_identifier=None, resolve_timeout_ms=3000):
        from zeroconf import ServiceBrowser
        check_service(service)
        self.zc, self.type, self.events = zc, service_type(service), events
        self.own = own_identifier
        self.resolve_timeout_ms = resolve_timeout_ms
        self.instances = {}          # instance name -> identifier hex
        self.lock = threading.Lock()
        self.browser = ServiceBrowser(zc, self.type, handlers=[self._on_change])

    def _on_change(self, zeroconf, service_type, name, state_change):
        from zeroconf import ServiceStateChange
        if state_change is ServiceStateChange.Removed:
            with self.lock:
                ident = self.instances.pop(name, None)
            if ident is not None:
                self.events.post("lost", None, identifier=ident, instance=name)
            return
        if state_change is ServiceStateChange.Added:
            threading.Thread(target=self._resolve, args=(name,), daemon=True).start()

    def _resolve(self, name):
        info = self.zc.get_service_info(self.type, name, timeout=self.resolve_timeout_ms)
        if info is None:
            return
        strings = decode_txt(info.text or b"")
        parsed = parse_txt(strings, self.own)
        addrs = info.parsed_addresses()
        if parsed is None or not addrs or not info.port:
            return
        with self.lock:
            if name in self.instances:
                return
            self.instances[name] = parsed[0]
        self.events.post("found", None, identifier=parsed[0], name=parsed[1], info=parsed[2],
                         endpoints=[(a, info.port) for a in addrs], strings=strings, service_info=info,
                         instance=name)

    def cancel(self):
        self.browser.cancel()
