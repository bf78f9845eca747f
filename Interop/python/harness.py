"""Drives the library's `interop-peer` (Interop/HARNESS.md) as a subprocess:
commands on stdin, one event per line on stdout, every wait bounded."""
import subprocess
import threading
import time
import urllib.parse

from mpcp.encodings import PeerID


def pct(name: str) -> str:
    return urllib.parse.quote(name, safe="-._~")


class Harness:
    def __init__(self, binary, *args, name="swift", env=None):
        self.cmd = [binary, "--name", name] + list(args)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
        self.lines = []
        self.cond = threading.Condition()
        self.stderr = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True).start()
        ready = self.wait(lambda w: w[0] == "READY", 15)
        if ready is None:
            raise RuntimeError("harness did not print READY: %s" % "".join(self.stderr[-5:]))
        self.peer_id = PeerID.decode(bytes.fromhex(ready[1]))
        self.peer_hex = ready[1]

    def _read(self, stream, sink):
        for line in stream:
            with self.cond:
                sink.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def send(self, line: str):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def mark(self):
        with self.cond:
            return len(self.lines)

    def wait(self, pred, timeout, since=0):
        """First output line (split in words) at index >= since matching pred."""
        deadline = time.monotonic() + timeout
        i = since
        with self.cond:
            while True:
                while i < len(self.lines):
                    words = self.lines[i].split()
                    i += 1
                    if words and pred(words):
                        return words
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and i >= len(self.lines):
                    return None
                self.cond.wait(min(left, 0.5))

    def all(self, pred, since=0):
        with self.cond:
            return [l.split() for l in self.lines[since:] if l.split() and pred(l.split())]

    def command(self, line, answer, timeout=10):
        m = self.mark()
        self.send(line)
        return self.wait(answer, timeout, since=m)

    def make_data(self, for_peer: PeerID) -> bytes:
        w = self.command("MAKE-DATA " + for_peer.hex(), lambda w: w[0] in ("DATA", "ERROR"))
        if not w or w[0] != "DATA":
            raise RuntimeError("MAKE-DATA failed: %s" % (w,))
        return bytes.fromhex(w[2])

    def quit(self, timeout=10):
        try:
            if self.proc.poll() is None:
                self.send("QUIT")
                self.wait(lambda w: w[0] == "BYE", timeout)
                self.proc.wait(timeout=5)
        except Exception:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.quit()
