import CMultipeerSodium

/// Key material that is wiped when the last reference goes away.
///
/// A class rather than a struct so that no silent copies of the secret are made;
/// share the reference instead of copying bytes out.
public final class SecureBytes: @unchecked Sendable {
    // Only touched through `withUnsafeBytes`, whose closures must not escape the pointer,
    // and never mutated after init: that is what makes the Sendable conformance sound.
    private let storage: UnsafeMutableRawBufferPointer

    public var count: Int { storage.count }

    /// Copies `bytes` into freshly allocated storage.
    public init<Bytes: Collection>(copying bytes: Bytes) where Bytes.Element == UInt8 {
        storage = .allocate(byteCount: bytes.count, alignment: 16)
        storage.copyBytes(from: bytes)
    }

    /// Fills `count` bytes from libsodium's CSPRNG.
    public init(randomCount count: Int) {
        precondition(count >= 0, "negative byte count")
        storage = .allocate(byteCount: count, alignment: 16)
        if let base = storage.baseAddress {
            randombytes_buf(base, count)
        }
    }

    /// Lets `body` fill `count` bytes, for example straight from a key-derivation call.
    public init(count: Int, initializingWith body: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        precondition(count >= 0, "negative byte count")
        storage = .allocate(byteCount: count, alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        // Every stored property is set, so if `body` throws, deinit wipes and frees the storage.
        try body(storage)
    }

    deinit {
        Self.wipe(storage)
        storage.deallocate()
    }

    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(storage))
    }

    /// Constant-time comparison; lengths are not secret.
    public func constantTimeEquals(_ other: SecureBytes) -> Bool {
        guard count == other.count else { return false }
        guard count > 0 else { return true }
        return withUnsafeBytes { mine in
            other.withUnsafeBytes { theirs in
                sodium_memcmp(mine.baseAddress!, theirs.baseAddress!, count) == 0
            }
        }
    }

    /// sodium_memzero is not optimised away, unlike a plain store before deallocation.
    static func wipe(_ buffer: UnsafeMutableRawBufferPointer) {
        if let base = buffer.baseAddress, buffer.count > 0 {
            sodium_memzero(base, buffer.count)
        }
    }
}
