import MultipeerDNS
import NIOCore
import Testing

/// Messages assembled by hand from RFC 1035 §4.1 and RFC 6762: decoding gives the expected
/// values, and encoding gives exactly the same bytes back.
@Suite("DNS hand-assembled vectors")
struct DNSVectorTests {
    static let ptrQueryQU = hex("""
        0000                                      // id 0 (mDNS)
        0000                                      // flags: a standard query
        0001 0000 0000 0000                       // 1 question, no records
        04 5f6d7063                               // @12 "_mpc"
        04 5f746370                               // @17 "_tcp"
        05 6c6f63616c                             // @22 "local"
        00                                        //     root
        000c                                      // type PTR
        8001                                      // QU bit (RFC 6762 §5.4) | class IN
        """)

    static let dnssdResponse = hex("""
        0000                                      // id 0
        8400                                      // QR, AA
        0000 0001 0000 0005                       // 1 answer, 5 additionals
        // answer: _mpc._tcp.local PTR Peer._mpc._tcp.local
        04 5f6d7063 04 5f746370 05 6c6f63616c 00  // @12 _mpc @17 _tcp @22 local
        000c 0001 00001194 0007                   // PTR, IN, TTL 4500, rdlength 7
        04 50656572 c00c                          // @39 "Peer", then -> @12
        // SRV: Peer._mpc._tcp.local -> host.local:4242
        c027                                      // -> @39
        0021 8001 00000078 000d                   // SRV, cache flush | IN, TTL 120, rdlength 13
        0000 0000 1092                            // priority 0, weight 0, port 4242
        04 686f7374 c016                          // @64 "host", then -> @22 "local"
        // TXT: Peer._mpc._tcp.local "txtvers=1" "k=v"
        c027
        0010 8001 00001194 000e                   // TXT, cache flush | IN, TTL 4500, rdlength 14
        09 7478747665 72733d31                    // "txtvers=1"
        03 6b3d76                                 // "k=v"
        // A: host.local 10.0.0.1
        c040                                      // -> @64
        0001 8001 00000078 0004
        0a000001
        // AAAA: host.local fe80::1
        c040
        001c 8001 00000078 0010
        fe80 0000 0000 0000 0000 0000 0000 0001
        // NSEC: host.local has A and AAAA only (RFC 6762 §6.1)
        c040
        002f 8001 00000078 0008
        c040                                      // next name -> @64
        00 04 40000008                            // window 0, 4 bytes: bit 1 (A), bit 28 (AAAA)
        """)

    @Test func ptrQueryWithQUBit() throws {
        let message = try decode(Self.ptrQueryQU)
        let expected = DNSMessage(
            isResponse: false,
            questions: [DNSQuestion(name: try DNSName("_mpc._tcp.local"), type: .ptr, unicastResponse: true)])
        #expect(message == expected)
        #expect(message.questions.first?.recordClass == 1)
        #expect(bytes(of: try expected.encoded()) == Self.ptrQueryQU)
    }

    static func expectedResponse() throws -> DNSMessage {
        let service = try DNSName("_mpc._tcp.local")
        let instance = try service.prepending("Peer")
        let host = try DNSName("host.local")
        return DNSMessage(
            isResponse: true, isAuthoritative: true,
            answers: [DNSResourceRecord(name: service, ttl: 4500, data: .ptr(instance))],
            additionals: [
                DNSResourceRecord(
                    name: instance, ttl: 120, data: .srv(priority: 0, weight: 0, port: 4242, target: host), cacheFlush: true),
                DNSResourceRecord(
                    name: instance, ttl: 4500, data: .txt([Array("txtvers=1".utf8), Array("k=v".utf8)]), cacheFlush: true),
                DNSResourceRecord(name: host, ttl: 120, data: .a(0x0A00_0001), cacheFlush: true),
                DNSResourceRecord(
                    name: host, ttl: 120, data: .aaaa([0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [1]),
                    cacheFlush: true),
                DNSResourceRecord(name: host, ttl: 120, data: .nsec(next: host, types: [.a, .aaaa]), cacheFlush: true),
            ])
    }

    @Test func dnssdResponseWithCompression() throws {
        let message = try decode(Self.dnssdResponse)
        let expected = try Self.expectedResponse()
        #expect(message == expected)
        // Field by field too, so a failure says which.
        #expect(message.isResponse && message.isAuthoritative && !message.isTruncated)
        #expect(message.answers.count == 1 && message.additionals.count == 5)
        for (got, want) in zip(message.answers + message.additionals, expected.answers + expected.additionals) {
            #expect(got == want)
        }
        #expect(message.additionals[0].name.description == "Peer._mpc._tcp.local")
        #expect(bytes(of: try expected.encoded()) == Self.dnssdResponse)
        #expect(bytes(of: try message.encoded()) == Self.dnssdResponse)
    }

    @Test func encodeIntoAppendsToWhatIsThere() throws {
        var buffer = ByteBuffer(bytes: [0xAA, 0xBB])
        try Self.expectedResponse().encode(into: &buffer)
        #expect(bytes(of: buffer) == [0xAA, 0xBB] + Self.dnssdResponse)
    }

    @Test func headerFieldsRoundTrip() throws {
        var message = DNSMessage(id: 0xBEEF, isResponse: true, isAuthoritative: true, isTruncated: true)
        message.opcode = 5
        message.responseCode = 3
        let encoded = bytes(of: try message.encoded())
        // QR 0x8000 | opcode 5 << 11 | AA 0x0400 | TC 0x0200 | rcode 3
        #expect(encoded == hex("beef ae03 0000 0000 0000 0000"))
        #expect(try decode(encoded) == message)
    }

    @Test func ignoredHeaderBitsAreDropped() throws {
        // RD, RA, Z, AD and CD set: mDNS ignores them (RFC 6762 §18), so they do not come back.
        let message = try decode(hex("0000 01f0 0000 0000 0000 0000"))
        #expect(message == DNSMessage(isResponse: false))
        #expect(bytes(of: try message.encoded()) == hex("0000 0000 0000 0000 0000 0000"))
    }
}
