import MultipeerTestSupport
import NIOCore
import Testing

@testable import MultipeerDiscovery

#if canImport(Glibc)
import Glibc
@testable import MultipeerProtocol
#endif

/// Addresses as text (RFC 5952) and as socket addresses, the form found peers are reported and
/// dialled in.
@Suite("mDNS addresses")
struct MDNSAddressTests {
    static func ipv6(_ groups: [UInt16]) -> MDNSAddress { .ipv6(groups.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }) }

    @Test func ipv6TextFollowsRFC5952() {
        #expect(Self.ipv6([0xFE80, 0, 0, 0, 0, 0, 0, 1]).description == "fe80::1")
        #expect(Self.ipv6([0, 0, 0, 0, 0, 0, 0, 0]).description == "::")
        #expect(Self.ipv6([0, 0, 0, 0, 0, 0, 0, 1]).description == "::1")
        #expect(Self.ipv6([1, 0, 0, 0, 0, 0, 0, 0]).description == "1::")
        // The first of two equally long runs; a single zero group stays as it is.
        #expect(Self.ipv6([0x2001, 0xDB8, 0, 0, 1, 0, 0, 1]).description == "2001:db8::1:0:0:1")
        #expect(Self.ipv6([0x2001, 0xDB8, 0, 1, 1, 1, 1, 1]).description == "2001:db8:0:1:1:1:1:1")
        #expect(Self.ipv6([0x2001, 0, 0, 1, 0, 0, 0, 1]).description == "2001:0:0:1::1")
        #expect(MDNSAddress.ipv4(0xA9FE_0102).description == "169.254.1.2")
    }

    /// Against the C library's inet_ntop, on addresses with many zero groups (not the
    /// IPv4-embedding prefixes, which inet_ntop writes in dotted form).
    @Test func ipv6TextMatchesInetNtop() {
        var random = SeededGenerator(seed: 5952)
        for _ in 0..<2_000 {
            let groups = (0..<8).map { _ in [0, 0, 1, 0xABCD].randomElement(using: &random)! as UInt16 }
            guard groups.prefix(5).contains(where: { $0 != 0 }) else { continue }
            let address = Self.ipv6(groups)
            guard case .ipv6(var bytes) = address else { continue }
            var text = [UInt8](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            let written = text.withUnsafeMutableBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { inet_ntop(AF_INET6, &bytes, $0.baseAddress, socklen_t($0.count)) }
            }
            #expect(written != nil)
            #expect(address.description == String(decoding: text.prefix { $0 != 0 }, as: UTF8.self), "\(groups)")
        }
    }

    /// A link-local address is only usable with its interface: the socket address carries it.
    @Test func ipv6SocketAddressesCarryTheInterface() throws {
        let address = MDNSInterfaces.socketAddress(Self.ipv6([0xFE80, 0, 0, 0, 0, 0, 0, 7]), port: 5353, interfaceIndex: 3)
        guard case .v6(let v6) = address else {
            Issue.record("not IPv6: \(address)")
            return
        }
        #expect(v6.address.sin6_scope_id == 3 && UInt16(bigEndian: v6.address.sin6_port) == 5353)
        #expect(address.ipAddress?.hasPrefix("fe80::7") == true)
        let v4 = MDNSInterfaces.socketAddress(.ipv4(0x7F00_0001), port: 80, interfaceIndex: 3)
        #expect(v4.ipAddress == "127.0.0.1" && v4.port == 80)
    }
}
