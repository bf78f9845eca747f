import MultipeerWire
import NIOCore

/// Frames whose payloads sit exactly on the lower and upper bounds of docs/PROTOCOL.md §6.3.
enum FrameBounds {
    static let longName = String(repeating: "n", count: WireLimits.maxChannelNameBytes)
    static let longPeer = try! WirePeerID(
        identifier: Bytes16(high: 1, low: 2), displayName: String(repeating: "p", count: WireLimits.maxDisplayNameBytes))
    static let shortPeer = try! WirePeerID(identifier: Bytes16(high: 3, low: 4), displayName: "p")

    static func smallest(_ type: FrameType) -> Frame {
        switch type {
        case .hello: .hello(try! Hello(purpose: .answer, preambleEcho: .zero, listenPort: 0, datagramPort: 0, datagramReceiverID: 0, peerID: shortPeer))
        case .trust: .trust(.accepted)
        case .invitation: .invitation(try! Invitation(timeoutMilliseconds: 1, context: ByteBuffer()))
        case .invitationResponse: .invitationResponse(try! InvitationAnswer(.declined))
        case .meshIntroduction: .meshIntroduction(try! MeshIntroduction(entries: [
            .init(peerID: shortPeer, endpoint: try! WireEndpoint(address: .ipv4(0), port: 1))]))
        case .goodbye: .goodbye(.normal)
        case .ping: .ping(0)
        case .pairingCommit: .pairingCommit(try! SHA256Digest(bytes: [UInt8](repeating: 1, count: 32)))
        case .pairingNonce: .pairingNonce(try! PairingNonce(bytes: [UInt8](repeating: 2, count: 32)))
        case .pong: .pong(0)
        case .resume: .resume(try! ResumeProof(proof: [UInt8](repeating: 3, count: 32), delivered: 0))
        case .acknowledge: .acknowledge(delivered: 0)
        case .message: .message(ByteBuffer(), isEnd: true)
        case .streamOpen: .streamOpen(channel: 1, name: "")
        case .streamResume: .streamResume(channel: 1, ordinal: 0, name: "")
        case .streamAcknowledge: .streamAcknowledge(channel: 1, received: 0, closed: false)
        case .streamData: .streamData(channel: 1, ByteBuffer(bytes: [0]))
        case .streamClose: .streamClose(channel: 1)
        case .streamReset: .streamReset(channel: 1, code: .cancelled)
        case .windowUpdate: .windowUpdate(channel: 0, increment: 1)
        case .resourceOffer: .resourceOffer(channel: 1, try! ResourceOffer(size: 0, transferID: .zero, name: ""))
        case .resourceChunk: .resourceChunk(channel: 1, ByteBuffer(bytes: [0]))
        case .resourceComplete: .resourceComplete(channel: 1, sha256: try! SHA256Digest(bytes: [UInt8](repeating: 0, count: 32)))
        case .resourceCancel: .resourceCancel(channel: 1, reason: .cancelled)
        case .resourceAccept: .resourceAccept(channel: 1, offset: 0)
        case .resourceReceived: .resourceReceived(channel: 1)
        }
    }

    static func largest(_ type: FrameType) -> Frame {
        let full = ByteBuffer(repeating: 0x5A, count: WireLimits.maxFramePayload)
        switch type {
        case .hello:
            return .hello(try! Hello(
                purpose: .connectionData, preambleEcho: .zero, token: Bytes16(high: 9, low: 9),
                listenPort: 1, datagramPort: 2, datagramReceiverID: 3, peerID: longPeer))
        case .invitation:
            return .invitation(try! Invitation(
                timeoutMilliseconds: WireLimits.invitationTimeoutMilliseconds.upperBound,
                context: ByteBuffer(repeating: 1, count: WireLimits.maxInvitationContext)))
        case .meshIntroduction:
            let entry = MeshIntroduction.Entry(
                peerID: longPeer, endpoint: try! WireEndpoint(address: .ipv6(Bytes16(high: 5, low: 6)), port: .max))
            return .meshIntroduction(try! MeshIntroduction(entries: Array(repeating: entry, count: WireLimits.maxMeshIntroductionEntries)))
        case .message: return .message(full, isEnd: false)
        case .streamOpen: return .streamOpen(channel: .max, name: longName)
        case .streamResume: return .streamResume(channel: .max, ordinal: .max, name: longName)
        case .streamData: return .streamData(channel: .max, full)
        case .resourceOffer: return .resourceOffer(channel: .max, try! ResourceOffer(size: WireLimits.maxResourceSize, transferID: Bytes16(high: .max, low: .max), name: longName, resumed: true, sendID: .max))
        case .resourceChunk: return .resourceChunk(channel: .max, full)
        case .windowUpdate: return .windowUpdate(channel: .max, increment: WireLimits.maxWindow)
        case .invitationResponse:
            let endpoint = try! WireEndpoint(address: .ipv6(Bytes16(high: 7, low: 8)), port: .max)
            return .invitationResponse(try! InvitationAnswer(.accepted, connectionData: try! ConnectionData(
                encryptionPreference: .required, token: Bytes16(high: 1, low: 1), forPeer: Bytes16(high: 2, low: 2), peerID: longPeer,
                certificateFingerprint: try! SHA256Digest(bytes: [UInt8](repeating: 9, count: 32)),
                endpoints: Array(repeating: endpoint, count: WireLimits.maxConnectionDataEndpoints))))
        default: return smallest(type)
        }
    }
}
