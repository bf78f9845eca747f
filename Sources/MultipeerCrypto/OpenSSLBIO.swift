import CMultipeerOpenSSL
import CMultipeerShims

/// Small helpers for moving bytes in and out of OpenSSL memory BIOs.
enum OpenSSLBIO {
    /// A read-only BIO over `bytes`, valid only inside `body`.
    static func withReadBIO<Result>(
        _ bytes: [UInt8], _ body: (OpaquePointer) throws(SecurityError) -> Result
    ) throws(SecurityError) -> Result {
        // BIO_write takes an Int32 length: a larger input is refused rather than trapping.
        guard let length = Int32(exactly: bytes.count) else {
            throw SecurityError(.malformedData, "input of \(bytes.count) bytes is too large to parse")
        }
        let bio: OpaquePointer? = bytes.withUnsafeBytes { raw in
            // BIO_new_mem_buf does not copy; copy into a memory BIO so lifetime is ours to manage.
            let bio = BIO_new(BIO_s_mem())
            if let bio, !raw.isEmpty { _ = BIO_write(bio, raw.baseAddress, length) }
            return bio
        }
        guard let bio else { throw SecurityError.openSSL(.internalError, "BIO_new failed") }
        defer { BIO_free(bio) }
        return try body(bio)
    }

    /// Runs `body` with an empty memory BIO and returns what it wrote.
    static func collect(_ body: (OpaquePointer) -> Bool) throws(SecurityError) -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { throw SecurityError.openSSL(.internalError, "BIO_new failed") }
        defer { BIO_free(bio) }
        guard body(bio) else { throw SecurityError.openSSL(.internalError, "writing to a memory BIO failed") }
        var data: UnsafeMutablePointer<CChar>?
        let length = mp_BIO_get_mem_data(bio, &data)
        guard length > 0, let data else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: length))
    }

    static func string(_ body: (OpaquePointer) -> Bool) throws(SecurityError) -> String {
        String(decoding: try collect(body), as: UTF8.self)
    }
}
