import MultipeerDNS
import NIOCore

/// Multicast DNS constants (RFC 6762).
public enum MDNS {
    public static let port: UInt16 = 5353
    /// 224.0.0.251
    public static let ipv4Group: UInt32 = 0xE000_00FB
    /// ff02::fb
    public static let ipv6Group: [UInt8] = [0xFF, 0x02] + [UInt8](repeating: 0, count: 13) + [0xFB]
    /// Unique records (SRV, TXT, addresses): RFC 6762 §10.
    public static let hostRecordTTL: UInt32 = 120
    /// Shared records (PTR) and TXT.
    public static let serviceRecordTTL: UInt32 = 4_500
    /// The largest DNS message one query packet carries: a 1,500-byte Ethernet MTU less the IPv4
    /// (20) and UDP (8) headers, so multicast is never fragmented (RFC 6762 §7.2, §17).
    public static let ipv4QueryBudget = 1_472
    /// The same with the 40-byte IPv6 header.
    public static let ipv6QueryBudget = 1_452
}

/// An IP address as mDNS records and sockets carry it.
public enum MDNSAddress: Hashable, Sendable, CustomStringConvertible {
    /// Host order: 10.0.0.1 is 0x0A000001.
    case ipv4(UInt32)
    /// 16 bytes.
    case ipv6([UInt8])

    public var isIPv6: Bool { if case .ipv6 = self { true } else { false } }

    /// 224.0.0.251 or ff02::fb.
    public var isMDNSGroup: Bool { self == .ipv4(MDNS.ipv4Group) || self == .ipv6(MDNS.ipv6Group) }

    public var description: String {
        switch self {
        case .ipv4(let value): (0..<4).map { String(UInt8(truncatingIfNeeded: value >> (24 - 8 * UInt32($0)))) }.joined(separator: ".")
        case .ipv6(let bytes): Self.text(ipv6: bytes)
        }
    }

    /// RFC 5952 text: lowercase hex groups, the first longest run of two or more zero groups as "::".
    private static func text(ipv6 bytes: [UInt8]) -> String {
        let padded = Array(bytes.prefix(16)) + [UInt8](repeating: 0, count: max(0, 16 - bytes.count))
        let groups = stride(from: 0, to: 16, by: 2).map { UInt16(padded[$0]) << 8 | UInt16(padded[$0 + 1]) }
        var best = (start: 0, count: 0)
        var run = (start: 0, count: 0)
        for (index, group) in groups.enumerated() {
            run = group == 0 ? (run.count == 0 ? index : run.start, run.count + 1) : (index + 1, 0)
            if run.count > best.count { best = run }
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.count >= 2 else { return hex.joined(separator: ":") }
        return hex[..<best.start].joined(separator: ":") + "::" + hex[(best.start + best.count)...].joined(separator: ":")
    }
}

/// A network interface the discovery engine sends and listens on.
public struct MDNSInterface: Hashable, Sendable {
    public let index: Int
    public let name: String
    /// Ours: what the records publish and the sockets send from.
    public var addresses: [MDNSAddress]
    /// The subnets on this interface's link: a packet sent straight to us (not to the group)
    /// from outside them is dropped (RFC 6762 §11, `MDNSSource.isOnLink`).
    public var subnets: [MDNSSubnet]

    /// `subnets` has no default: with none, no unicast packet but an IPv6 link-local one would
    /// be on-link, and nothing would say so.
    public init(index: Int, name: String, addresses: [MDNSAddress], subnets: [MDNSSubnet]) {
        self.index = index
        self.name = name
        self.addresses = addresses
        self.subnets = subnets
    }

    /// What records and sockets depend on: the interface and its addresses. Subnets only decide
    /// which sources are on-link, so a change of them alone re-announces nothing.
    func isSameForPublishing(as other: MDNSInterface) -> Bool {
        index == other.index && name == other.name && addresses == other.addresses
    }
}

package extension [MDNSInterface] {
    func isSameForPublishing(as other: [MDNSInterface]) -> Bool { elementsEqual(other) { $0.isSameForPublishing(as: $1) } }
}

/// Where a packet came from.
public struct MDNSSource: Hashable, Sendable {
    public let address: MDNSAddress
    public let port: UInt16
    public let interfaceIndex: Int
    /// Sent to the mDNS group (224.0.0.251 or ff02::fb), not straight to us.
    public let sentToGroup: Bool

    public init(address: MDNSAddress, port: UInt16, interfaceIndex: Int, sentToGroup: Bool) {
        self.address = address
        self.port = port
        self.interfaceIndex = interfaceIndex
        self.sentToGroup = sentToGroup
    }
}

/// Where a packet goes: the mDNS group on one interface (IPv4 or IPv6), or straight back to a querier.
public enum MDNSDestination: Hashable, Sendable {
    case multicast(interfaceIndex: Int, ipv6: Bool)
    case unicast(MDNSSource)
}

public struct MDNSPacket: Sendable {
    public let message: DNSMessage
    public let destination: MDNSDestination
}

/// A small deadline-ordered queue of pending work, for the sans-I/O cores.
package struct JobQueue<Job> {
    private var jobs: [(deadline: NIODeadline, sequence: Int, job: Job)] = []
    private var sequence = 0

    var nextDeadline: NIODeadline? { jobs.first?.deadline }
    var count: Int { jobs.count }

    mutating func schedule(_ job: Job, at deadline: NIODeadline) {
        sequence += 1
        let item = (deadline: deadline, sequence: sequence, job: job)
        let position = jobs.firstIndex { ($0.deadline, $0.sequence) > (deadline, sequence) } ?? jobs.endIndex
        jobs.insert(item, at: position)
    }

    /// Removes and returns every job due at `now`, in order.
    mutating func takeDue(now: NIODeadline) -> [Job] {
        let due = jobs.prefix { $0.deadline <= now }.map(\.job)
        jobs.removeFirst(due.count)
        return due
    }

    mutating func removeAll(where shouldRemove: (Job) -> Bool) { jobs.removeAll { shouldRemove($0.job) } }
}
