import MultipeerWire
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

@Suite("Service types and discoveryInfo, as Apple documents them")
struct DiscoveryValidationTests {
    @Test(arguments: ["chat", "a", "my-game", "x1", "abcdefghijklmno", "1a", "a-b-c"])
    func validServiceTypes(_ name: String) throws {
        #expect(try ServiceType(name).serviceName.description == "_\(name)._tcp.local")
    }

    @Test(arguments: ["", "abcdefghijklmnop", "Chat", "my_game", "-chat", "chat-", "my--game", "123", "ch at", "caf\u{e9}", "chat.x"])
    func invalidServiceTypes(_ name: String) {
        #expect(throws: DiscoveryError.self) { try ServiceType(name) }
    }

    @Test func discoveryInfoFitsTXTStrings() throws {
        try DiscoveryTXT.validate(["room": "42", "k": String(repeating: "v", count: 253)])
        #expect(throws: DiscoveryError.self) { try DiscoveryTXT.validate(["k": String(repeating: "v", count: 254)]) }
        #expect(throws: DiscoveryError.self) { try DiscoveryTXT.validate(["a=b": "c"]) }
        #expect(throws: DiscoveryError.self) { try DiscoveryTXT.validate(["": "c"]) }
        #expect(throws: DiscoveryError.self) { try DiscoveryTXT.validate(["tab\t": "c"]) }
        for reserved in ["mpcid", "MPCDN", "txtvers"] {
            #expect(throws: DiscoveryError.self) { try DiscoveryTXT.validate([reserved: "x"]) }
        }
        let many = Dictionary(uniqueKeysWithValues: (0..<20).map { ("key\($0)", String(repeating: "v", count: 60)) })
        #expect(throws: DiscoveryError.self) { try DiscoveryTXT.validate(many) }
    }

    @Test func txtRoundTripsAndIgnoresWhatRFC6763SaysToIgnore() throws {
        let peer = try WirePeerID(identifier: Bytes16(high: 0x0011_2233_4455_6677, low: 0x8899_AABB_CCDD_EEFF), displayName: "Zoë")
        let strings = try DiscoveryTXT.encode(peer, info: ["room": "42", "empty": ""])
        let decoded = try #require(DiscoveryTXT.decode(strings))
        #expect(decoded.peer == peer && decoded.info == ["room": "42", "empty": ""])
        // A string without "=", a repeated key (first wins, case-insensitively), bad UTF-8 in a value.
        let extra = strings + [Array("flag".utf8), Array("ROOM=99".utf8), Array("bad=".utf8) + [0xFF]]
        #expect(DiscoveryTXT.decode(extra)?.info == ["room": "42", "empty": ""])
        // No identity, a short identifier, our own rules for the display name.
        #expect(DiscoveryTXT.decode([Array("mpcdn=x".utf8)]) == nil)
        #expect(DiscoveryTXT.decode([Array("mpcid=0011".utf8), Array("mpcdn=x".utf8)]) == nil)
        #expect(DiscoveryTXT.decode([Array("mpcid=\(DiscoveryTXT.hex(peer.identifier))".utf8), Array("mpcdn=".utf8)]) == nil)
    }
}
