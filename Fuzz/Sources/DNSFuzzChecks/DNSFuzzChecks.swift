import MultipeerDNS
import NIOCore

/// The properties every DNS fuzz input must keep, shared by the libFuzzer target and by the
/// corpus replay tests. A violated property traps, which is what libFuzzer records as a crash;
/// bad input itself must only ever produce a `DNSError`.
public enum DNSFuzzChecks {
    /// Decoding never traps. A decoded message re-encodes, and that encoding decodes to an equal
    /// message (names compare case-insensitively) and is a fixed point: encoding it again gives
    /// the same bytes.
    public static func checkMessage(_ input: UnsafeRawBufferPointer) {
        let bytes = ByteBuffer(bytes: input)
        guard let message = try? DNSMessage.decode(bytes) else { return }

        let encoded: ByteBuffer
        do {
            encoded = try message.encoded()
        } catch where error.code == .limitExceeded {
            // The input may have compressed harder than the encoder does (pointers into raw rdata
            // or into the middle of a name), so the same message can need more than 9,000 bytes.
            return
        } catch {
            preconditionFailure("a decoded message failed to encode: \(error)")
        }

        let again: DNSMessage
        do {
            again = try DNSMessage.decode(encoded)
        } catch {
            preconditionFailure("an encoded message failed to decode: \(error)")
        }
        precondition(again == message, "a re-encoded message decodes to a different message")

        do {
            let reencoded = try again.encoded()
            precondition(reencoded == encoded, "encoding is not a fixed point after one round trip")
        } catch {
            preconditionFailure("a round-tripped message failed to encode: \(error)")
        }
    }
}
