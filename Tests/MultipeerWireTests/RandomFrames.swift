import MultipeerTestSupport
import MultipeerWire
import NIOCore

/// Random valid values of every wire type, for property tests.
struct RandomFrames {
    var generator: SeededGenerator

    init(seed: UInt64) { generator = SeededGenerator(seed: seed) }

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &generator) }

    /// `count` random frames and their encodings laid end to end.
    mutating func stream(of count: Int) throws -> (frames: [Frame], bytes: [UInt8]) {
        let frames = (0..<count).map { _ in frame() }
        var bytes: [UInt8] = []
        for frame in frames { bytes += try encoded(frame) }
        return (frames, bytes)
    }
    mutating func bool() -> Bool { Bool.random(using: &generator) }
    mutating func u16() -> UInt16 { UInt16.random(in: .min ... .max, using: &generator) }
    mutating func u32(_ range: ClosedRange<UInt32> = .min ... .max) -> UInt32 { UInt32.random(in: range, using: &generator) }
    mutating func u64() -> UInt64 { generator.next() }
    mutating func bytes16() -> Bytes16 { .random(using: &generator) }

    mutating func bytes(_ count: Int) -> ByteBuffer {
        var out = ByteBuffer()
        for _ in 0..<count { out.writeInteger(UInt8.random(in: 0 ... 255, using: &generator)) }
        return out
    }

    /// A valid UTF-8 string of at most `maxBytes` bytes, mixing 1- to 4-byte scalars.
    mutating func string(minBytes: Int = 0, maxBytes: Int) -> String {
        let alphabet: [Character] = ["a", "Z", "0", " ", "é", "ß", "€", "中", "😀", "\u{0}", "\n"]
        let target = int(minBytes...maxBytes)
        var result = ""
        while result.utf8.count < target {
            let candidate = alphabet[int(0...alphabet.count - 1)]
            if result.utf8.count + String(candidate).utf8.count > maxBytes { break }
            result.append(candidate)
        }
        while result.utf8.count < minBytes { result.append("a") }
        return result
    }

    mutating func peerID() -> WirePeerID {
        try! WirePeerID(identifier: bytes16(), displayName: string(minBytes: 1, maxBytes: WireLimits.maxDisplayNameBytes))
    }

    mutating func endpoint() -> WireEndpoint {
        let address: WireEndpoint.Address = bool() ? .ipv4(u32()) : .ipv6(bytes16())
        return try! WireEndpoint(address: address, port: UInt16.random(in: 1 ... .max, using: &generator))
    }

    mutating func channel() -> UInt32 { u32(1 ... .max) }

    mutating func payload(max: Int = WireLimits.maxFramePayload, min: Int = 0) -> ByteBuffer {
        // Mostly small payloads, sometimes the very edges, to keep runs fast but cover limits.
        switch int(0...9) {
        case 0: bytes(min)
        case 1: bytes(max)
        default: bytes(int(min...Swift.min(max, 300)))
        }
    }

    mutating func hello() -> Hello {
        let purpose = Hello.Purpose.allCases[int(0...3)]
        let datagrams = bool()
        return try! Hello(
            version: UInt8.random(in: 0...255, using: &generator),
            purpose: purpose,
            preambleEcho: bytes16(),
            token: purpose == .connectionData || purpose == .meshIntroduction ? bytes16() : .zero,
            listenPort: u16(),
            datagramPort: datagrams ? UInt16.random(in: 1 ... .max, using: &generator) : 0,
            datagramReceiverID: datagrams ? u32(1 ... .max) : 0,
            peerID: peerID()
        )
    }

    mutating func frame() -> Frame {
        switch int(0...23) {
        case 0: return .hello(hello())
        case 1: return .trust(TrustDecision.allCases[int(0...2)])
        case 2:
            return .invitation(try! Invitation(
                timeoutMilliseconds: u32(WireLimits.invitationTimeoutMilliseconds),
                context: payload(max: WireLimits.maxInvitationContext)))
        case 3:
            let response = InvitationResponse.allCases[int(0...InvitationResponse.allCases.count - 1)]
            guard response == .accepted else { return .invitationResponse(try! InvitationAnswer(response)) }
            return .invitationResponse(try! InvitationAnswer(.accepted, connectionData: try! ConnectionData(
                encryptionPreference: .required, token: Bytes16(high: u64(), low: u64()), forPeer: Bytes16(high: u64(), low: u64()),
                peerID: peerID(), certificateFingerprint: bool() ? try! SHA256Digest(bytes: bytes(32).readableBytesView) : nil,
                endpoints: (0..<int(1...3)).map { _ in endpoint() })))
        case 4:
            let count = int(MeshIntroduction.entryCounts)
            return .meshIntroduction(try! MeshIntroduction(entries: (0..<count).map { _ in
                MeshIntroduction.Entry(peerID: peerID(), endpoint: endpoint())
            }))
        case 5: return .goodbye(GoodbyeReason(rawValue: u16()))
        case 6: return .ping(u64())
        case 7: return .pong(u64())
        case 8: return .message(payload(), isEnd: bool())
        case 9: return .streamOpen(channel: channel(), name: string(maxBytes: WireLimits.maxChannelNameBytes))
        case 10: return .streamData(channel: channel(), payload(min: 1))
        case 11: return .streamClose(channel: channel())
        case 12: return .streamReset(channel: channel(), code: StreamResetCode(rawValue: u16()))
        case 13: return .windowUpdate(channel: u32(), increment: u32(1...WireLimits.maxWindow))
        case 14:
            return .resourceOffer(channel: channel(), try! ResourceOffer(
                size: UInt64.random(in: 0...WireLimits.maxResourceSize, using: &generator),
                transferID: Bytes16(high: u64(), low: u64()),
                name: string(maxBytes: WireLimits.maxChannelNameBytes)))
        case 15: return .resourceChunk(channel: channel(), payload(min: 1))
        case 16:
            return .resourceComplete(channel: channel(), sha256: try! SHA256Digest(bytes: bytes(32).readableBytesView))
        case 17: return .resourceCancel(channel: channel(), reason: ResourceCancelReason(rawValue: u16()))
        case 18: return .resourceAccept(channel: channel(), offset: u64())
        case 19: return .pairingCommit(try! SHA256Digest(bytes: bytes(32).readableBytesView))
        case 20: return .pairingNonce(try! PairingNonce(bytes: bytes(32).readableBytesView))
        case 21: return .streamResume(channel: channel(), ordinal: u32(), name: string(maxBytes: WireLimits.maxChannelNameBytes))
        case 22: return .streamAcknowledge(channel: channel(), received: u64(), closed: bool())
        default: return .resourceReceived(channel: channel())
        }
    }
}
