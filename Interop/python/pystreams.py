"""Driving a Python Session's streams, shared by scenarios.py and the
loopback tests."""
import threading
import time


def received(s, peer, ordinal=0):
    """Bytes session `s` received of `peer`'s stream `ordinal`; -1 before it opened."""
    ins = s.incoming_streams(peer).get(ordinal)
    return ins.received if ins is not None else -1


def writer(st, data, piece=65536, pause=0.002):
    """A stream that keeps writing (while the link goes and comes back)."""
    def run():
        for i in range(0, len(data), piece):
            if not st.write(data[i:i + piece], 30):
                return
            time.sleep(pause)
        st.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
