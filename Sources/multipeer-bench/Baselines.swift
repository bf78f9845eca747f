import CMultipeerOpenSSL
import CMultipeerShims
import CMultipeerSodium
import Foundation
import Synchronization
import MultipeerCrypto

/// Small, honest programs that do the same job without the library: blocking POSIX sockets on
/// loopback, OpenSSL alone, libsodium alone. Each runs in the same process as the library's
/// scenarios, so machine drift affects both alike.
enum Baselines {
    // MARK: Sockets

    static func tcpListener() -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(fd, 16)
        return (fd, boundPort(fd))
    }

    static func tcpConnect(port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = loopback(port: port)
        withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        noDelay(fd)
        return fd
    }

    static func noDelay(_ fd: Int32) {
        var on: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    static func udpSocket() -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = loopback(port: 0)
        withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        return (fd, boundPort(fd))
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    static func boundPort(_ fd: Int32) -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func writeAll(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < buffer.count {
            let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if written <= 0 { return }
            offset += written
        }
    }

    static func readExactly(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Bool {
        var offset = 0
        while offset < buffer.count {
            let got = read(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if got <= 0 { return false }
            offset += got
        }
        return true
    }

    /// Runs `body` on a new thread; the returned closure waits for it.
    static func thread(_ body: @escaping @Sendable () -> Void) -> () -> Void {
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            body()
            done.signal()
        }
        thread.start()
        return { done.wait() }
    }

    // MARK: Raw TCP

    /// Bytes per second through a blocking loopback TCP connection, 1 MiB writes.
    static func tcpBulk(bytes: Int) -> Double {
        let (listener, port) = tcpListener()
        defer { close(listener) }
        let chunk = 1 << 20
        let join = thread {
            let fd = accept(listener, nil, nil)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
            var total = 0
            while total < bytes {
                let got = read(fd, buffer.baseAddress, chunk)
                if got <= 0 { break }
                total += got
            }
            buffer.deallocate()
            close(fd)
        }
        let fd = tcpConnect(port: port)
        let data = [UInt8](repeating: 0x5A, count: chunk)
        let start = ContinuousClock.now
        data.withUnsafeBytes { raw in for _ in 0..<(bytes / chunk) { writeAll(fd, raw) } }
        join()
        let elapsed = ContinuousClock.now - start
        close(fd)
        return Double(bytes) / seconds(elapsed)
    }

    /// Round trips of `size` bytes over blocking loopback TCP, in microseconds.
    static func tcpPingPong(samples: Int, size: Int) -> [Double] {
        let (listener, port) = tcpListener()
        defer { close(listener) }
        let join = thread {
            let fd = accept(listener, nil, nil)
            noDelay(fd)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
            while readExactly(fd, buffer) { writeAll(fd, UnsafeRawBufferPointer(buffer)) }
            buffer.deallocate()
            close(fd)
        }
        let fd = tcpConnect(port: port)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        var times: [Double] = []
        for _ in 0..<samples {
            let start = ContinuousClock.now
            writeAll(fd, UnsafeRawBufferPointer(buffer))
            _ = readExactly(fd, buffer)
            times.append(seconds(ContinuousClock.now - start) * 1e6)
        }
        close(fd)
        join()
        return times
    }

    // MARK: Raw UDP

    /// Packets per second delivered, and the fraction lost, sending `count` datagrams flat out.
    static func udp(count: Int, size: Int) -> (rate: Double, loss: Double) {
        let (receiver, port) = udpSocket()
        let (sender, _) = udpSocket()
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(receiver, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let received = Counter()
        let lastArrival = Mutex(ContinuousClock.now)
        let join = thread {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
            while recv(receiver, buffer.baseAddress, 65_536, 0) > 0 {
                received.add(1)
                lastArrival.withLock { $0 = ContinuousClock.now }
            }
            buffer.deallocate()
        }
        var address = loopback(port: port)
        let payload = [UInt8](repeating: 7, count: size)
        let start = ContinuousClock.now
        for _ in 0..<count {
            payload.withUnsafeBytes { raw in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = sendto(sender, raw.baseAddress, size, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
            }
        }
        join()
        let elapsed = seconds(lastArrival.withLock { $0 } - start)
        close(sender)
        close(receiver)
        return (Double(received.value) / max(elapsed, 1e-6), 1 - Double(received.value) / Double(count))
    }

    // MARK: libsodium

    /// XChaCha20-Poly1305 seal + open pairs per second on `size`-byte messages.
    static func sodiumSealOpen(count: Int, size: Int) -> Double {
        var key = [UInt8](repeating: 1, count: 32)
        var nonce = [UInt8](repeating: 0, count: 24)
        let message = [UInt8](repeating: 3, count: size)
        var sealed = [UInt8](repeating: 0, count: size + 16)
        var opened = [UInt8](repeating: 0, count: size)
        var length: UInt64 = 0
        let start = ContinuousClock.now
        for index in 0..<count {
            nonce[0] = UInt8(truncatingIfNeeded: index)
            _ = crypto_aead_xchacha20poly1305_ietf_encrypt(&sealed, &length, message, UInt64(size), nil, 0, nil, nonce, &key)
            _ = crypto_aead_xchacha20poly1305_ietf_decrypt(&opened, &length, nil, sealed, UInt64(size + 16), nil, 0, nonce, &key)
        }
        return Double(count) / seconds(ContinuousClock.now - start)
    }

    // MARK: OpenSSL alone

    /// An SSL_CTX made from the library's identity through PEM, so the baseline uses OpenSSL only.
    /// A TLS 1.3 context with the identity, requiring and verifying the peer's chain up to `anchor`,
    /// as the library's trust step does.
    static func context(for identity: SecurityIdentity, anchor: Certificate) -> OpaquePointer {
        let context = SSL_CTX_new(TLS_method())!
        _ = mp_SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION)
        _ = mp_SSL_CTX_set_max_proto_version(context, TLS1_3_VERSION)
        _ = SSL_CTX_set_num_tickets(context, 0)
        let certificatePEM = Array(identity.certificate.pemEncoded.utf8)
        let keyText: String = (try? identity.privateKey.pemEncoded()) ?? ""
        let keyPEM = Array(keyText.utf8)
        let certificateBIO = BIO_new(BIO_s_mem())!
        _ = BIO_write(certificateBIO, certificatePEM, Int32(certificatePEM.count))
        let keyBIO = BIO_new(BIO_s_mem())!
        _ = BIO_write(keyBIO, keyPEM, Int32(keyPEM.count))
        let x509 = PEM_read_bio_X509(certificateBIO, nil, nil, nil)
        let key = PEM_read_bio_PrivateKey(keyBIO, nil, nil, nil)
        _ = SSL_CTX_use_certificate(context, x509)
        _ = SSL_CTX_use_PrivateKey(context, key)
        X509_free(x509)  // the context holds its own references
        EVP_PKEY_free(key)
        BIO_free(certificateBIO)
        BIO_free(keyBIO)
        let anchorPEM = Array(anchor.pemEncoded.utf8)
        let anchorBIO = BIO_new(BIO_s_mem())!
        _ = BIO_write(anchorBIO, anchorPEM, Int32(anchorPEM.count))
        let anchorX509 = PEM_read_bio_X509(anchorBIO, nil, nil, nil)
        _ = X509_STORE_add_cert(SSL_CTX_get_cert_store(context), anchorX509)
        X509_free(anchorX509)
        BIO_free(anchorBIO)
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
        return context
    }

    /// Bytes per second of TLS 1.3 application data over blocking sockets, 16 KiB records.
    static func tlsBulk(bytes: Int, server serverIdentity: SecurityIdentity, client clientIdentity: SecurityIdentity, anchor: Certificate) -> Double {
        withTLSEndpoints(server: serverIdentity, client: clientIdentity, anchor: anchor) { serverContext, clientContext, listener, port in
            tlsBulk(bytes: bytes, serverContext: serverContext, clientContext: clientContext, listener: listener, port: port)
        }
    }

    /// Two OpenSSL contexts and a listening socket for one baseline; freed afterwards.
    private static func withTLSEndpoints<Result>(
        server: SecurityIdentity, client: SecurityIdentity, anchor: Certificate,
        _ body: (UncheckedBox<OpaquePointer>, OpaquePointer, Int32, Int) -> Result
    ) -> Result {
        let serverContext = UncheckedBox(context(for: server, anchor: anchor))
        let clientContext = context(for: client, anchor: anchor)
        let (listener, port) = tcpListener()
        defer {
            SSL_CTX_free(serverContext.value)
            SSL_CTX_free(clientContext)
            close(listener)
        }
        return body(serverContext, clientContext, listener, port)
    }

    private static func tlsBulk(
        bytes: Int, serverContext: UncheckedBox<OpaquePointer>, clientContext: OpaquePointer, listener: Int32, port: Int
    ) -> Double {
        let record = 16_384
        let join = thread {
            let fd = accept(listener, nil, nil)
            let ssl = SSL_new(serverContext.value)
            SSL_set_fd(ssl, fd)
            guard SSL_accept(ssl) == 1 else { return }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: record, alignment: 16)
            var total = 0
            while total < bytes {
                let got = SSL_read(ssl, buffer.baseAddress, Int32(record))
                if got <= 0 { break }
                total += Int(got)
            }
            buffer.deallocate()
            SSL_free(ssl)
            close(fd)
        }
        let fd = tcpConnect(port: port)
        let ssl = SSL_new(clientContext)
        SSL_set_fd(ssl, fd)
        let start = ContinuousClock.now
        guard SSL_connect(ssl) == 1 else { return 0 }
        let data = [UInt8](repeating: 0x5A, count: record)
        for _ in 0..<(bytes / record) { _ = SSL_write(ssl, data, Int32(record)) }
        join()
        let elapsed = ContinuousClock.now - start
        SSL_free(ssl)
        close(fd)
        return Double(bytes) / seconds(elapsed)
    }

    /// Mutually authenticated TLS 1.3 handshakes per second over loopback, one after another, and
    /// the key exchange group they negotiated (OpenSSL's default groups, as the library's
    /// contexts are not reachable from here; the report names both groups).
    static func tlsHandshakes(
        count: Int, server serverIdentity: SecurityIdentity, client clientIdentity: SecurityIdentity, anchor: Certificate
    ) throws -> (rate: Double, group: String?) {
        let (rate, group, failures) = withTLSEndpoints(server: serverIdentity, client: clientIdentity, anchor: anchor) { serverContext, clientContext, listener, port in
            tlsHandshakes(count: count, serverContext: serverContext, clientContext: clientContext, listener: listener, port: port)
        }
        // A handshake that failed verification would be cheaper than a real one and flatter the baseline.
        guard failures == 0 else { throw BaselineFailure("\(failures) of \(count) baseline TLS handshakes failed") }
        return (rate, group)
    }

    /// The group a completed handshake used, by OpenSSL's name.
    static func negotiatedGroup(_ ssl: OpaquePointer?) -> String? {
        let group = mp_SSL_get_negotiated_group(ssl)
        guard group != 0, let name = SSL_group_to_name(ssl, group) else { return nil }
        return String(cString: name)
    }

    private static func tlsHandshakes(
        count: Int, serverContext: UncheckedBox<OpaquePointer>, clientContext: OpaquePointer, listener: Int32, port: Int
    ) -> (rate: Double, group: String?, failures: Int) {
        let serverFailures = Counter()
        let join = thread {
            for _ in 0..<count {
                let fd = accept(listener, nil, nil)
                let ssl = SSL_new(serverContext.value)
                SSL_set_fd(ssl, fd)
                var byte: UInt8 = 0
                // The client's first byte: the handshake, with the client's chain verified, is complete.
                if SSL_accept(ssl) != 1 || SSL_read(ssl, &byte, 1) != 1 { serverFailures.add(1) }
                SSL_free(ssl)
                close(fd)
            }
        }
        var clientFailures = 0
        var group: String?
        let start = ContinuousClock.now
        for index in 0..<count {
            let fd = tcpConnect(port: port)
            let ssl = SSL_new(clientContext)
            SSL_set_fd(ssl, fd)
            var byte: UInt8 = 1
            if SSL_connect(ssl) != 1 || SSL_write(ssl, &byte, 1) != 1 { clientFailures += 1 }
            if index == 0 { group = negotiatedGroup(ssl) }
            SSL_free(ssl)
            close(fd)
        }
        join()
        return (Double(count) / seconds(ContinuousClock.now - start), group, clientFailures + serverFailures.value)
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

struct BaselineFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A thread-safe counter for baseline threads.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add(_ amount: Int) { lock.withLock { count += amount } }
    var value: Int { lock.withLock { count } }
}

/// Hands an OpenSSL pointer to a baseline thread; the caller keeps it alive until the thread ends.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
