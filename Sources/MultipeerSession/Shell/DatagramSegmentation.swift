#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import MultipeerWire
import NIOCore
import MultipeerProtocol

/// What the engine has learned about the kernel's segmentation offload on its UDP socket: how
/// long a datagram may be to travel in a segmented write, and whether to segment at all. A
/// segmented write whose segments do not fit the path's MTU is refused (EMSGSIZE) where the same
/// datagrams written one by one would be fragmented and arrive, so joining stays below the MTU.
struct DatagramSegmentation {
    /// A 1,500-byte MTU less the IPv6 and UDP headers: the longest segment of a write to a
    /// non-loopback address until the kernel says less.
    static let ethernetSegmentLimit = 1_452
    /// Refusals (the socket closes each time) before the engine stops segmenting for good: one
    /// may be another write's error that failed every pending write with it.
    static let refusalsBeforeGivingUp = 2

    private(set) var enabled: Bool
    /// Lowered below the segment size of any write the kernel found too large.
    private(set) var largestSegment = WireLimits.maxUDPPayload
    private(set) var refusals = 0
    /// The socket whose closing was last counted: every write pending on it fails with the same
    /// error, and one closing is one refusal.
    private var lastRefusedSocket: ObjectIdentifier?

    init(enabled: Bool) { self.enabled = enabled }

    /// The longest datagram that may join a segmented write to `address`; 0 when none may.
    func segmentLimit(for address: SocketAddress) -> Int {
        guard enabled else { return 0 }
        return address.isLoopback ? largestSegment : min(largestSegment, Self.ethernetSegmentLimit)
    }

    /// A segmented write on `socket` failed; returns what to do with its datagrams.
    mutating func writeFailed(segmentSize: Int, error: any Error, socket: ObjectIdentifier) -> Outcome {
        if let error = error as? ChannelError, case .writeMessageTooLarge = error {
            // EMSGSIZE: the socket stays open. Join only shorter datagrams from now on.
            largestSegment = min(largestSegment, segmentSize - 1)
            return .resendSingly
        }
        guard let error = error as? IOError, Self.refusalCodes.contains(error.errnoCode), socket != lastRefusedSocket else { return .lost }
        lastRefusedSocket = socket
        refusals += 1
        if refusals >= Self.refusalsBeforeGivingUp { enabled = false }
        return .lost
    }

    enum Outcome: Equatable {
        /// Write the batch's datagrams again, one per write.
        case resendSingly
        /// The socket closed with the write (it is bound again); the datagrams are gone.
        case lost
    }

    /// Errors with which the kernel refuses a segmented write (a device without checksum
    /// offload, IPsec, an older kernel's answer to a segment above the MTU). SwiftNIO closes the
    /// socket on them; the engine binds it again.
    private static let refusalCodes: Set<CInt> = [EIO, EINVAL, EOPNOTSUPP, ENOPROTOOPT]
}

extension SocketAddress {
    /// 127.0.0.0/8, ::1, or an IPv4-mapped 127.0.0.0/8: whose MTU is 64 KiB on Linux.
    var isLoopback: Bool {
        switch self {
        case .v4(let address):
            return UInt32(bigEndian: address.address.sin_addr.s_addr) >> 24 == 127
        case .v6(let address):
            return withUnsafeBytes(of: address.address.sin6_addr) { bytes in
                let mapped = bytes.prefix(10).allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
                return (bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1) || (mapped && bytes[12] == 127)
            }
        case .unixDomainSocket:
            return false
        }
    }
}
