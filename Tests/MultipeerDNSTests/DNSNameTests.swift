import MultipeerDNS
import Testing

@Suite("DNS names")
struct DNSNameTests {
    @Test func dottedForms() throws {
        let name = try DNSName("_mpc._tcp.local")
        #expect(name.labels == [Array("_mpc".utf8), Array("_tcp".utf8), Array("local".utf8)])
        #expect(try DNSName("_mpc._tcp.local.") == name)
        #expect(try DNSName("") == .root)
        #expect(try DNSName(".") == .root)
        #expect(DNSName.root.labels.isEmpty)
        #expect(DNSName.root.description == ".")
        #expect(name.description == "_mpc._tcp.local")
        for bad in ["a..b", ".a", "a.b..", ".."] {
            #expect(throws: DNSError.self) { try DNSName(bad) }
        }
    }

    @Test func caseInsensitiveEqualityAndHashing() throws {
        let lower = try DNSName("peer._mpc._tcp.local")
        let mixed = try DNSName("PeEr._MPC._Tcp.LOCAL")
        #expect(lower == mixed)
        #expect(lower.hashValue == mixed.hashValue)
        #expect(Set([lower, mixed]).count == 1)
        // The original case is kept.
        #expect(mixed.labels[0] == Array("PeEr".utf8))
        // Only ASCII folds: RFC 6762 §16 leaves other characters as they are.
        #expect(try DNSName("É.local") != DNSName("é.local"))
        #expect(try DNSName("a.local") != DNSName("a.local.com"))
        #expect(try DNSName("ab.local") != DNSName("a.blocal"))
    }

    @Test func labelsWithDotsAndUTF8() throws {
        let service = try DNSName("_mpc._tcp.local")
        let instance = try service.prepending("Dr. Ünïcode's Mac 🙂")
        #expect(instance.labels.count == 4)
        #expect(instance.labels[0] == Array("Dr. Ünïcode's Mac 🙂".utf8))
        #expect(instance.description == "Dr\\. Ünïcode's Mac 🙂._mpc._tcp.local")
        let backslash = try DNSName(labels: [Array("a\\b".utf8), Array("local".utf8)])
        #expect(backslash.description == "a\\\\b.local")
        #expect(try service.prepending(Array("x".utf8)) == DNSName("x._mpc._tcp.local"))
    }

    @Test func subdomains() throws {
        let local = try DNSName("local")
        let service = try DNSName("_mpc._TCP.local")
        let instance = try DNSName("Peer._mpc._tcp.LOCAL")
        #expect(instance.isSubdomain(of: service))
        #expect(instance.isSubdomain(of: local))
        #expect(instance.isSubdomain(of: .root))
        #expect(service.isSubdomain(of: service))
        #expect(!service.isSubdomain(of: instance))
        #expect(try !DNSName("_mpc._udp.local").isSubdomain(of: service))
        #expect(try !DNSName("xlocal").isSubdomain(of: local))
    }

    @Test func lengthLimits() throws {
        let label63 = [UInt8](repeating: 0x61, count: 63)
        // 3 × (1 + 63) + (1 + 61) + 1 = 255: the longest name.
        let longest = try DNSName(labels: [label63, label63, label63, [UInt8](repeating: 0x62, count: 61)])
        #expect(longest.labels.count == 4)
        let tooLong = #expect(throws: DNSError.self) {
            try DNSName(labels: [label63, label63, label63, [UInt8](repeating: 0x62, count: 62)])
        }
        #expect(tooLong?.code == .nameTooLong)
        #expect(#expect(throws: DNSError.self) { try longest.prepending("x") }?.code == .nameTooLong)
        #expect(#expect(throws: DNSError.self) { try DNSName(labels: [label63 + [0x61]]) }?.code == .invalidLabel)
        #expect(#expect(throws: DNSError.self) { try DNSName(labels: [[]]) }?.code == .invalidLabel)
        #expect(#expect(throws: DNSError.self) { try DNSName(String(repeating: "a.", count: 200)) }?.code == .nameTooLong)
        #expect(#expect(throws: DNSError.self) { try DNSName(String(repeating: "a", count: 64)) }?.code == .invalidLabel)
    }

    @Test func recordTypeNames() {
        #expect(DNSRecordType.srv.description == "SRV")
        #expect(DNSRecordType(rawValue: 33) == .srv)
        #expect(DNSRecordType(rawValue: 65280).description == "TYPE65280")
    }
}
