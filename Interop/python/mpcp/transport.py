"""Byte transports under the frames: plain TCP or TLS (pyOpenSSL on a
non-blocking socket). One lock serialises every SSL call, so a reader thread
and writer threads can share a connection; waits happen outside the lock."""
import collections
import select
import socket
import threading
import time

from OpenSSL import SSL


class TransportClosed(Exception):
    pass


class PlainTransport:
    tls = None

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sock.setblocking(False)
        self.wlock = threading.Lock()

    def _wait(self, want_write, timeout):
        if want_write:
            select.select([], [self.sock], [], timeout)
        else:
            select.select([self.sock], [], [], timeout)

    def send_all(self, data: bytes, deadline=None):
        with self.wlock:
            self._send_raw(data, deadline)

    def flush(self, deadline=None):
        pass

    def _send_raw(self, data, deadline):
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
                view = view[n:]
            except (BlockingIOError, InterruptedError):
                self._check_deadline(deadline)
                self._wait(True, 0.05)
            except OSError as e:
                raise TransportClosed(str(e))

    def recv(self, timeout: float) -> bytes:
        """Some bytes, b"" on timeout; raises TransportClosed at EOF."""
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return b""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as e:
            raise TransportClosed(str(e))
        if not data:
            raise TransportClosed("EOF")
        return data

    @staticmethod
    def _check_deadline(deadline):
        if deadline is not None and time.monotonic() > deadline:
            raise TransportClosed("write deadline")

    def close(self, notify=True):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class TlsTransport(PlainTransport):
    """TLS over memory BIOs: OpenSSL never touches the socket, so a failed
    socket write (the peer closed) cannot poison the SSL object, and bytes
    already received (a GOODBYE just before the peer's close) stay readable.
    Ciphertext produced by any SSL call is appended, under the SSL lock, to a
    FIFO that the writer flushes to the socket in order."""

    def __init__(self, sock: socket.socket, ctx: SSL.Context, server: bool):
        super().__init__(sock)
        self.wlock = threading.RLock()         # socket writes (send_all calls flush)
        self.lock = threading.RLock()          # every SSL call
        self.cipher_out = collections.deque()  # ciphertext waiting for the socket
        self.tls = SSL.Connection(ctx, None)
        self.eof = False
        if server:
            self.tls.set_accept_state()
        else:
            self.tls.set_connect_state()

    def _drain_bio(self):
        while True:
            try:
                data = self.tls.bio_read(65536)
            except SSL.WantReadError:
                return
            if not data:
                return
            self.cipher_out.append(data)

    def _ssl(self, fn):
        """Run one SSL call; returns (result, want_read)."""
        with self.lock:
            try:
                return fn(), False
            except SSL.WantReadError:
                return None, True
            except SSL.ZeroReturnError:
                raise TransportClosed("close_notify")
            except SSL.SysCallError as e:
                raise TransportClosed("syscall: %s" % (e,))
            except SSL.Error as e:
                raise TransportClosed("tls: %s" % (e,))
            finally:
                self._drain_bio()

    def flush(self, deadline=None):
        """Write queued ciphertext to the socket, in order."""
        with self.wlock:
            while True:
                with self.lock:
                    if not self.cipher_out:
                        return
                    chunk = self.cipher_out.popleft()
                PlainTransport._send_raw(self, chunk, deadline)

    def _feed_from_socket(self, timeout):
        """Move raw bytes from the socket into OpenSSL; False on timeout."""
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            self.eof = True
            raise TransportClosed(str(e))
        if not data:
            self.eof = True
            with self.lock:
                self.tls.bio_shutdown()
            return True
        with self.lock:
            self.tls.bio_write(data)
        return True

    def handshake(self, deadline):
        while True:
            _, want = self._ssl(lambda: self.tls.do_handshake())
            self.flush(deadline)
            if not want:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportClosed("handshake deadline")
            if self.eof:
                raise TransportClosed("EOF during handshake")
            self._feed_from_socket(min(left, 0.1))

    def send_all(self, data: bytes, deadline=None):
        with self.wlock:
            view = memoryview(data)
            while view:
                chunk = bytes(view[:16384])
                n, _ = self._ssl(lambda: self.tls.send(chunk))
                view = view[n:]
            self.flush(deadline)

    def recv(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            data, want = self._ssl(lambda: self.tls.recv(65536))
            if self.cipher_out and self.wlock.acquire(blocking=False):
                try:
                    self.flush(time.monotonic() + 5)
                except TransportClosed:
                    pass
                finally:
                    self.wlock.release()
            if not want:
                if not data:
                    raise TransportClosed("EOF")
                return data
            if self.eof:
                raise TransportClosed("EOF")
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            self._feed_from_socket(left)

    def export(self, label: bytes, length: int, context: bytes = b"") -> bytes:
        with self.lock:
            return self.tls.export_keying_material(label, length, context)

    def close(self, notify=True):
        if notify:
            try:
                self._ssl(lambda: self.tls.shutdown())
                self.flush(time.monotonic() + 1)
            except Exception:
                pass
        super().close()
