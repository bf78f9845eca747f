import CMultipeerSodium
import MultipeerWire
import NIOCore

/// XChaCha20-Poly1305 (libsodium) over one datagram: the clear header is the associated data
/// and the nonce comes from its epoch and counter (docs/PROTOCOL.md §8).
public enum DatagramCipher {
    public static let keyLength = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)

    /// Header and sealed body, ready for the socket.
    public static func seal(_ message: ByteBuffer, header: DatagramHeader, key: SecureBytes) -> ByteBuffer {
        precondition(header.kind == .sealed && key.count == keyLength)
        var out = ByteBufferAllocator().buffer(capacity: WireLimits.datagramHeaderLength + message.readableBytes + WireLimits.datagramTagLength)
        // Header and nonce live on the stack: nothing is allocated per datagram but its buffer.
        header.withEncodedBytes { associated in
            out.writeBytes(associated)
            header.withNonce { nonce in
                _ = out.writeWithUnsafeMutableBytes(minimumWritableBytes: message.readableBytes + WireLimits.datagramTagLength) { output in
                    var written: UInt64 = 0
                    message.withUnsafeReadableBytes { plaintext in
                        key.withUnsafeBytes { keyBytes in
                            _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                                output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written,
                                plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                                associated.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(associated.count), nil,
                                nonce.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
                        }
                    }
                    return Int(written)
                }
            }
        }
        return out
    }

    /// The message, or nil if the tag does not verify. Deliberately uninformative.
    public static func open(_ body: ByteBuffer, header: DatagramHeader, key: SecureBytes) -> ByteBuffer? {
        guard header.kind == .sealed, key.count == keyLength, body.readableBytes >= WireLimits.datagramTagLength else { return nil }
        var out = ByteBufferAllocator().buffer(capacity: body.readableBytes)
        var ok = false
        header.withEncodedBytes { associated in
            header.withNonce { nonce in
                _ = out.writeWithUnsafeMutableBytes(minimumWritableBytes: max(body.readableBytes - WireLimits.datagramTagLength, 1)) { output in
                    var written: UInt64 = 0
                    ok = body.withUnsafeReadableBytes { ciphertext in
                        key.withUnsafeBytes { keyBytes in
                            crypto_aead_xchacha20poly1305_ietf_decrypt(
                                output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, nil,
                                ciphertext.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(ciphertext.count),
                                associated.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(associated.count),
                                nonce.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 0
                        }
                    }
                    return ok ? Int(written) : 0
                }
            }
        }
        return ok ? out : nil
    }
}
