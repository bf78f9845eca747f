#!/usr/bin/env python3
"""An independent mDNS / DNS-SD peer for interop tests, on python-zeroconf (run inside a network
namespace the test created). Reads nothing but the end of standard input, which ends it.

  zeroconf_peer.py register NAME SERVICE ADDRESS IDENTIFIER-HEX PORT   publishes a peer as
      docs/PROTOCOL.md section 12 says; prints REGISTERED, and says goodbye at the end
  zeroconf_peer.py browse SERVICE ADDRESS   prints FOUND <instance> <port> <k=v,...> and LOST <instance>
"""
import socket
import sys
import threading

from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait_for_end_of_input():
    for _ in sys.stdin:
        pass


def register(name, service, address, identifier, port):
    zc = Zeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    kind = "_%s._tcp.local." % service
    info = ServiceInfo(
        kind,
        "%s.%s" % (identifier, kind),
        addresses=[socket.inet_aton(address)],
        port=port,
        properties={"txtvers": "1", "mpcid": identifier, "mpcdn": name, "from": "zeroconf"},
        server="zc-%s.local." % identifier,
    )
    zc.register_service(info)
    emit("REGISTERED")
    wait_for_end_of_input()
    zc.unregister_service(info)
    zc.close()


def browse(service, address):
    zc = Zeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    kind = "_%s._tcp.local." % service
    lock = threading.Lock()

    def changed(zeroconf, service_type, name, state_change):
        if state_change is ServiceStateChange.Added:
            info = zeroconf.get_service_info(service_type, name, timeout=3000)
            if info is None:
                return
            pairs = sorted("%s=%s" % (k.decode(), (v or b"").decode()) for k, v in info.properties.items())
            with lock:
                emit("FOUND %s %d %s" % (name, info.port, ",".join(pairs)))
        elif state_change is ServiceStateChange.Removed:
            with lock:
                emit("LOST %s" % name)

    ServiceBrowser(zc, kind, handlers=[changed])
    emit("BROWSING")
    wait_for_end_of_input()
    zc.close()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "register":
        register(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    elif mode == "browse":
        browse(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: zeroconf_peer.py register NAME SERVICE ADDRESS IDENTIFIER-HEX PORT | browse SERVICE ADDRESS")
