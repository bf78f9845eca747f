import CMultipeerSodium
import MultipeerWire
import NIOCore

/// One direction's datagram key for one epoch, ready for sealing and opening (docs/PROTOCOL.md §8).
///
/// XChaCha20-Poly1305 first derives a subkey with HChaCha20 from the key and the nonce's first
/// 16 bytes, then runs ChaCha20-Poly1305 (IETF) with the last 8. Our nonce's first 16 bytes are
/// zeros and the epoch, the same for every datagram of the epoch, so the subkey is derived once
/// here instead of once per datagram. Same bytes on the wire as `DatagramCipher`.
public final class DatagramEpochKey: Sendable {
    public let epoch: UInt32
    private let subkey: SecureBytes

    public init(key: SecureBytes, epoch: UInt32) {
        precondition(key.count == DatagramCipher.keyLength)
        self.epoch = epoch
        var prefix: (UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, epoch.bigEndian)
        subkey = withUnsafeBytes(of: &prefix) { input in
            key.withUnsafeBytes { keyBytes in
                SecureBytes(count: Int(crypto_core_hchacha20_OUTPUTBYTES)) { output in
                    _ = crypto_core_hchacha20(
                        output.baseAddress!.assumingMemoryBound(to: UInt8.self), input.baseAddress!.assumingMemoryBound(to: UInt8.self),
                        keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self), nil)
                }
            }
        }
    }

    /// The IETF nonce, in stack memory: four zero bytes and the counter (big-endian), which are
    /// the XChaCha20 nonce's last 8 bytes.
    private static func withNonce<Result>(_ counter: UInt64, _ body: (UnsafePointer<UInt8>) -> Result) -> Result {
        var nonce: (UInt32, UInt32, UInt32) = (0, UInt32(counter >> 32).bigEndian, UInt32(truncatingIfNeeded: counter).bigEndian)
        return withUnsafeBytes(of: &nonce) { raw in
            precondition(raw.count == Int(crypto_aead_chacha20poly1305_ietf_NPUBBYTES))
            return body(raw.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// Header and sealed body, ready for the socket.
    public func seal(_ message: ByteBuffer, header: DatagramHeader) -> ByteBuffer {
        precondition(header.kind == .sealed && header.epoch == epoch)
        var out = ByteBufferAllocator().buffer(capacity: WireLimits.datagramHeaderLength + message.readableBytes + WireLimits.datagramTagLength)
        header.withEncodedBytes { associated in
            out.writeBytes(associated)
            Self.withNonce(header.counter) { nonce in
                _ = out.writeWithUnsafeMutableBytes(minimumWritableBytes: message.readableBytes + WireLimits.datagramTagLength) { output in
                    var written: UInt64 = 0
                    message.withUnsafeReadableBytes { plaintext in
                        subkey.withUnsafeBytes { keyBytes in
                            _ = crypto_aead_chacha20poly1305_ietf_encrypt(
                                output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written,
                                plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                                associated.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(associated.count), nil,
                                nonce, keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
                        }
                    }
                    return Int(written)
                }
            }
        }
        return out
    }

    /// The message, or nil if the tag does not verify or the datagram is of another epoch.
    public func open(_ body: ByteBuffer, header: DatagramHeader) -> ByteBuffer? {
        guard header.kind == .sealed, header.epoch == epoch, body.readableBytes >= WireLimits.datagramTagLength else { return nil }
        var out = ByteBufferAllocator().buffer(capacity: body.readableBytes)
        var ok = false
        header.withEncodedBytes { associated in
            Self.withNonce(header.counter) { nonce in
                _ = out.writeWithUnsafeMutableBytes(minimumWritableBytes: max(body.readableBytes - WireLimits.datagramTagLength, 1)) { output in
                    var written: UInt64 = 0
                    ok = body.withUnsafeReadableBytes { ciphertext in
                        subkey.withUnsafeBytes { keyBytes in
                            crypto_aead_chacha20poly1305_ietf_decrypt(
                                output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, nil,
                                ciphertext.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(ciphertext.count),
                                associated.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(associated.count),
                                nonce, keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 0
                        }
                    }
                    return ok ? Int(written) : 0
                }
            }
        }
        return ok ? out : nil
    }
}
