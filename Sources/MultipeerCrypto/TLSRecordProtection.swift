import CMultipeerOpenSSL
import NIOCore

/// One direction of TLS 1.3 record protection (RFC 8446 §5.2, §5.3): the AEAD keyed from a
/// traffic secret, each record's nonce made of the static IV and the record's sequence number,
/// and the next generation of keys on KeyUpdate (§7.2).
package final class TLSRecordProtection {
    package static let headerLength = 5
    package static let tagLength = 16
    /// application_data, the outer type of every protected record.
    static let outerContentType: UInt8 = 23
    /// The largest record body RFC 8446 §5.2 allows: 16 KiB of content, its type, padding, tag.
    package static let maximumCiphertextLength = TLSEngine.maximumRecordPlaintext + 256
    /// Content up to this size is copied into the record and encrypted in one call.
    package static let gatheredContentLimit = 1_024

    let suite: TLSCipherSuite
    private let sealing: Bool
    private let context: OpaquePointer
    // Exclusivity unchecked: see TLSEngine.
    @exclusivity(unchecked) private var secret: SecureBytes
    /// The write or read IV; derived from the secret, so wiped with it.
    private let iv: UnsafeMutableRawBufferPointer
    /// Records sealed or opened under the current key.
    @exclusivity(unchecked) private(set) var sequence: UInt64 = 0

    /// Content up to this size is gathered: `gatheredContentLimit`, or what a test sets to
    /// compare the two ways of sealing.
    private let gatheringLimit: Int

    package init(suite: TLSCipherSuite, secret: SecureBytes, sealing: Bool, gatheringLimit: Int = TLSRecordProtection.gatheredContentLimit) throws(SecurityError) {
        try TLSKeySchedule.checkTrafficSecret(secret, suite: suite)
        guard let context = EVP_CIPHER_CTX_new() else {
            throw SecurityError.openSSL(.internalError, "EVP_CIPHER_CTX_new failed")
        }
        // Allocated once nothing before full initialization can throw: deinit frees it from here on.
        iv = UnsafeMutableRawBufferPointer.allocate(byteCount: TLSKeySchedule.ivLength, alignment: 16)
        iv.initializeMemory(as: UInt8.self, repeating: 0)
        self.gatheringLimit = gatheringLimit
        self.suite = suite
        self.sealing = sealing
        self.context = context
        self.secret = secret
        try install(secret)
    }

    deinit {
        EVP_CIPHER_CTX_free(context)  // cleanses the key schedule
        SecureBytes.wipe(iv)
        iv.deallocate()
    }

    /// Moves to the next traffic secret (a KeyUpdate sent or received).
    package func update() throws(SecurityError) {
        try install(TLSKeySchedule.expandLabel(secret, "traffic upd", length: suite.hashLength, suite: suite))
    }

    private func install(_ next: SecureBytes) throws(SecurityError) {
        let key = try TLSKeySchedule.expandLabel(next, "key", length: suite.keyLength, suite: suite)
        let nextIV = try TLSKeySchedule.expandLabel(next, "iv", length: TLSKeySchedule.ivLength, suite: suite)
        let keyed = key.withUnsafeBytes { raw in
            EVP_CipherInit_ex(context, suite.cipher, nil, raw.baseAddress?.assumingMemoryBound(to: UInt8.self), nil, sealing ? 1 : 0) == 1
        }
        guard keyed else { throw SecurityError.openSSL(.internalError, "setting a TLS traffic key failed") }
        nextIV.withUnsafeBytes { iv.copyMemory(from: $0) }
        secret = next
        sequence = 0
    }

    /// Sets the nonce of the record with the current sequence number (§5.3).
    private func startRecord() -> Bool {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: TLSKeySchedule.ivLength) { nonce in
            let last = TLSKeySchedule.ivLength - 1
            for index in 0...last { nonce[index] = iv.load(fromByteOffset: index, as: UInt8.self) }
            for shift in 0..<8 { nonce[last - shift] ^= UInt8(truncatingIfNeeded: sequence >> (8 * shift)) }
            defer { SecureBytes.wipe(UnsafeMutableRawBufferPointer(nonce)) }
            return EVP_CipherInit_ex(context, nil, nil, nil, nonce.baseAddress, -1) == 1
        }
    }

    /// Appends one record to `output`: header, then `content` and `contentType` encrypted, then
    /// the tag. `content` is one or two pieces (a frame head and the start of its body).
    package func seal(contentType: UInt8, _ content: UnsafeRawBufferPointer, _ more: UnsafeRawBufferPointer = .init(start: nil, count: 0), into output: inout ByteBuffer) throws(SecurityError) {
        precondition(sealing, "sealing with an opening key")
        let contentLength = content.count + more.count
        // The engine seals at most 16 KiB of content; tests forge up to the ciphertext limit.
        precondition(contentLength + 1 + Self.tagLength <= Self.maximumCiphertextLength, "record over the ciphertext limit")
        // Never reached with a KeyUpdate every 2^24 records, but a nonce must not repeat.
        guard sequence < UInt64.max else { throw SecurityError(.tlsFailure, "record sequence numbers exhausted") }
        let bodyLength = contentLength + 1 + Self.tagLength
        let recordLength = Self.headerLength + bodyLength
        let written = output.writeWithUnsafeMutableBytes(minimumWritableBytes: recordLength) { raw -> Int in
            let record = raw.baseAddress!.assumingMemoryBound(to: UInt8.self)
            record[0] = Self.outerContentType
            record[1] = 3
            record[2] = 3
            record[3] = UInt8(bodyLength >> 8)
            record[4] = UInt8(bodyLength & 0xff)
            var type = contentType
            var count: Int32 = 0
            guard startRecord(),
                EVP_EncryptUpdate(context, nil, &count, record, Int32(Self.headerLength)) == 1
            else { return 0 }
            var offset = Self.headerLength
            if contentLength <= gatheringLimit {
                // Small: gathered behind the header with its type and encrypted in place, one
                // cipher call instead of three (each costs more than copying these bytes).
                let inner = record + Self.headerLength
                if let base = content.baseAddress { inner.update(from: base.assumingMemoryBound(to: UInt8.self), count: content.count) }
                if let base = more.baseAddress { (inner + content.count).update(from: base.assumingMemoryBound(to: UInt8.self), count: more.count) }
                inner[contentLength] = contentType
                guard EVP_EncryptUpdate(context, inner, &count, inner, Int32(contentLength + 1)) == 1, Int(count) == contentLength + 1 else {
                    // Not committed to the buffer, but the plaintext copy must not stay in it.
                    SecureBytes.wipe(UnsafeMutableRawBufferPointer(start: inner, count: contentLength + 1))
                    return 0
                }
                offset += contentLength
            } else {
                guard encrypt(content, to: record, at: &offset), encrypt(more, to: record, at: &offset),
                    EVP_EncryptUpdate(context, record + offset, &count, &type, 1) == 1, count == 1
                else { return 0 }
            }
            guard EVP_EncryptFinal_ex(context, record + offset + 1, &count) == 1,
                EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_AEAD_GET_TAG, Int32(Self.tagLength), record + offset + 1) == 1
            else { return 0 }
            return recordLength
        }
        guard written == recordLength else { throw SecurityError.openSSL(.tlsFailure, "sealing a TLS record failed") }
        sequence += 1
    }

    private func encrypt(_ piece: UnsafeRawBufferPointer, to record: UnsafeMutablePointer<UInt8>, at offset: inout Int) -> Bool {
        guard let base = piece.baseAddress, piece.count > 0 else { return true }
        var count: Int32 = 0
        guard EVP_EncryptUpdate(context, record + offset, &count, base.assumingMemoryBound(to: UInt8.self), Int32(piece.count)) == 1,
            Int(count) == piece.count
        else { return false }
        offset += piece.count
        return true
    }

    /// Opens the record `record` (header and body) into `output`, which has room for the body
    /// less its tag and may be the body itself. Returns the inner plaintext's length (content,
    /// type, padding), or nil when the record does not authenticate; `output` is then wiped, so no
    /// unauthenticated plaintext stays in the caller's memory.
    ///
    /// With `last`, `output` has room for one byte less: the inner plaintext's last byte (the
    /// content type, or padding) goes to `last`. So a record whose content exactly fills the
    /// caller's buffer is still opened straight into it.
    package func open(_ record: UnsafeRawBufferPointer, into output: UnsafeMutableRawPointer, last: UnsafeMutablePointer<UInt8>? = nil) -> Int? {
        precondition(!sealing, "opening with a sealing key")
        let innerLength = record.count - Self.headerLength - Self.tagLength
        precondition(innerLength > 0, "a record shorter than its tag")
        guard sequence < UInt64.max else { return nil }
        let base = record.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let body = base + Self.headerLength
        let plaintext = output.assumingMemoryBound(to: UInt8.self)
        // Into `output`, the inner plaintext or all of it but its last byte. (No closures here:
        // a local captured by one would be boxed, an allocation per record.)
        let first = last == nil ? innerLength : innerLength - 1
        var count: Int32 = 0
        var decrypted = startRecord() && EVP_DecryptUpdate(context, nil, &count, base, Int32(Self.headerLength)) == 1
        if decrypted, first > 0 {
            decrypted = EVP_DecryptUpdate(context, plaintext, &count, body, Int32(first)) == 1 && Int(count) == first
        }
        if decrypted, let last {
            decrypted = EVP_DecryptUpdate(context, last, &count, body + first, 1) == 1 && count == 1
        }
        guard decrypted,
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_AEAD_SET_TAG, Int32(Self.tagLength), UnsafeMutablePointer(mutating: body + innerLength)) == 1,
            EVP_DecryptFinal_ex(context, plaintext + first, &count) == 1
        else {
            // The cipher wrote its output before the tag was checked.
            SecureBytes.wipe(UnsafeMutableRawBufferPointer(start: output, count: first))
            last?.pointee = 0
            return nil
        }
        sequence += 1
        return innerLength
    }
}
