import MultipeerWire
import NIOCore

/// Builds a `Frame` from fuzz-chosen fields. Values are biased toward what the receiver checks
/// (the real preamble echo and peer IDs in HELLO, channel 0 or not), so crafted frames get past
/// the first check often enough to reach the next.
struct FrameBuilder {
    /// The echo both sides of the real handshake compute.
    let echo: Bytes16
    let localPeer: WirePeerID
    let remotePeer: WirePeerID

    /// nil when the chosen fields break a rule the payload types check on their own.
    func frame(_ input: inout FuzzInput) -> Frame? {
        let type = input.byte()
        switch type % 24 {
        case 0: return hello(&input)
        case 1: return TrustDecision(rawValue: input.byte() % 4).map(Frame.trust)
        case 2:
            let timeout: UInt32 = input.bool() ? 30_000 : input.integer()
            return (try? Invitation(timeoutMilliseconds: timeout, context: ByteBuffer(bytes: input.bytes(upTo: 64)))).map(Frame.invitation)
        case 3:
            // Answers other than an acceptance (which needs valid connection data) are built here.
            guard let response = InvitationResponse(rawValue: input.byte() % 6), response != .accepted else { return nil }
            return (try? InvitationAnswer(response)).map(Frame.invitationResponse)
        case 4: return meshIntroduction(&input)
        case 5: return .goodbye(GoodbyeReason(rawValue: UInt16(input.byte())))
        case 6: return .ping(input.integer())
        case 7: return .pong(input.integer())
        case 8: return .message(ByteBuffer(bytes: input.bytes(upTo: 255)), isEnd: input.bool())
        case 9: return .streamOpen(channel: channel(&input), name: string(&input))
        case 10: return .streamData(channel: channel(&input), ByteBuffer(bytes: input.bytes(upTo: 255)))
        case 11: return .streamClose(channel: channel(&input))
        case 12: return .streamReset(channel: channel(&input), code: StreamResetCode(rawValue: UInt16(input.byte())))
        case 13:
            let channel = channel(&input)
            return .windowUpdate(channel: channel, increment: input.bool() ? UInt32(input.byte()) : input.integer())
        case 14:
            let channel = channel(&input)
            let size: UInt64 = input.bool() ? UInt64(input.integer(UInt16.self)) : input.integer()
            let transferID = Bytes16(high: input.integer(), low: input.integer())
            let name = string(&input)
            // RESUMED and SEND_ID too, so offers get past a link-recovery connection's rule.
            let resumed = input.bool()
            let sendID: UInt64? = input.bool() ? input.integer() : nil
            return (try? ResourceOffer(size: size, transferID: transferID, name: name, resumed: resumed, sendID: sendID))
                .map { .resourceOffer(channel: channel, $0) }
        case 15: return .resourceChunk(channel: channel(&input), ByteBuffer(bytes: input.bytes(upTo: 255)))
        case 16:
            let channel = channel(&input)
            let digest = input.take(32)
            return (try? SHA256Digest(bytes: digest + [UInt8](repeating: 0, count: 32 - digest.count)))
                .map { .resourceComplete(channel: channel, sha256: $0) }
        case 17: return .resourceCancel(channel: channel(&input), reason: ResourceCancelReason(rawValue: UInt16(input.byte())))
        case 18: return .resourceAccept(channel: channel(&input), offset: input.integer())
        case 19:
            let bytes = input.take(32)
            return (try? SHA256Digest(bytes: bytes + [UInt8](repeating: 0, count: 32 - bytes.count))).map(Frame.pairingCommit)
        case 20:
            let bytes = input.take(32)
            return (try? PairingNonce(bytes: bytes + [UInt8](repeating: 0, count: 32 - bytes.count))).map(Frame.pairingNonce)
        case 22:
            let proof = input.take(32)
            return (try? ResumeProof(proof: proof + [UInt8](repeating: 0, count: 32 - proof.count), delivered: input.integer())).map(Frame.resume)
        case 23: return .acknowledge(delivered: input.bool() ? UInt64(input.byte()) : input.integer())
        default: return .resourceReceived(channel: channel(&input))
        }
    }

    private func hello(_ input: inout FuzzInput) -> Frame? {
        let flags = input.byte()
        // Both sides offer the highest version, so that is the negotiated one.
        let version = flags & 1 == 0 ? WireLimits.maxProtocolVersion : input.byte()
        guard let purpose = Hello.Purpose(rawValue: input.byte() % 5) else { return nil }
        let echo = flags & 2 == 0 ? echo : Bytes16(high: input.integer(), low: input.integer())
        let token = flags & 4 == 0 ? Bytes16.zero : Bytes16(high: input.integer(), low: input.integer())
        let peer = switch flags >> 3 & 3 {
        case 0, 1: remotePeer
        case 2: localPeer
        default: peerID(&input)
        }
        let datagramReceiverID: UInt32 = flags & 0x20 == 0 ? 0 : input.integer()
        guard let peer,
            let hello = try? Hello(
                version: version, purpose: purpose, preambleEcho: echo, token: token, listenPort: input.integer(),
                datagramPort: datagramReceiverID == 0 ? 0 : 40_002, datagramReceiverID: datagramReceiverID, peerID: peer)
        else { return nil }
        return .hello(hello)
    }

    private func meshIntroduction(_ input: inout FuzzInput) -> Frame? {
        let count = Int(input.byte() % 8)
        var entries: [MeshIntroduction.Entry] = []
        for _ in 0..<count {
            guard let peer = peerID(&input) else { return nil }
            let address = WireEndpoint.Address.ipv4(input.integer())
            let port: UInt16 = input.integer()
            // Port 0: a member that does not listen (§6.4.5).
            let endpoint = port == 0 ? .notListening(at: address) : try! WireEndpoint(address: address, port: port)
            entries.append(MeshIntroduction.Entry(peerID: peer, endpoint: endpoint))
        }
        return (try? MeshIntroduction(entries: entries)).map(Frame.meshIntroduction)
    }

    private func peerID(_ input: inout FuzzInput) -> WirePeerID? {
        try? WirePeerID(identifier: Bytes16(high: UInt64(input.byte()), low: input.integer()), displayName: string(&input))
    }

    /// Mostly 0 and small channels, where the channel rules of §6.3 bite.
    private func channel(_ input: inout FuzzInput) -> UInt32 {
        let choice = input.byte()
        return choice < 0xF0 ? UInt32(choice % 4) : input.integer()
    }

    /// Any bytes; invalid UTF-8 turns into replacement characters, which lengthens the string.
    private func string(_ input: inout FuzzInput) -> String {
        String(decoding: input.bytes(upTo: 80), as: UTF8.self)
    }
}
