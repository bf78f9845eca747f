import MultipeerCrypto
import MultipeerWire

/// §7.8: whether a resource the peer said was complete is the one it offered, and the answer
/// that says so. The length is judged first, so a short transfer costs no hashing.
package enum ResourceVerdict {
    /// Nil when every offered byte arrived.
    package static func length(received: UInt64, offered: UInt64) -> TransferError? {
        received == offered ? nil : TransferError(.integrityFailure, detail: "\(received) of \(offered) bytes arrived")
    }

    /// Nil when the content hashes to the digest of RESOURCE_COMPLETE.
    package static func digest(computed: [UInt8], expected: SHA256Digest) -> TransferError? {
        computed == expected.bytes ? nil : TransferError(.integrityFailure, detail: "SHA-256 mismatch")
    }

    /// RESOURCE_RECEIVED for a resource stored whole, RESOURCE_CANCEL 2 for one that is not.
    package static func answer(on channel: UInt32, failure: TransferError?) -> Frame {
        failure == nil ? .resourceReceived(channel: channel) : .resourceCancel(channel: channel, reason: .integrityFailure)
    }
}
