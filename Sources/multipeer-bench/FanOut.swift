import Foundation
import MultipeerConnectivity
import MultipeerCrypto

/// One sender to the others of a mesh: 1 MiB reliable messages, each sent once to every member
/// (one `send` call naming them all), with at most 8 MiB in flight to the slowest receiver.
enum FanOut {
    /// Bytes delivered per second over all receivers together, for a mesh of `members` sessions.
    static func rate(members: Int, bytesPerReceiver: Int, identities: [SecurityIdentity]) async throws -> Double {
        precondition((2...8).contains(members))
        let sender = makeSession("sender", preference: .required, identity: identities[0])
        let receivers = (1..<members).map { makeSession("r\($0)", preference: .required, identity: identities[$0]) }
        let counters = receivers.map { ReceiveCounter($0.events()) }
        for receiver in receivers {
            receiver.connectPeer(sender.myPeerID, withNearbyConnectionData: try await sender.nearbyConnectionData(forPeer: receiver.myPeerID))
        }
        let everyone = [sender] + receivers
        try await waitUntil { everyone.allSatisfy { $0.connectedPeers.count == members - 1 } }
        let message = Data(repeating: 0x5A, count: 1 << 20)
        let targets = receivers.map(\.myPeerID)
        let window = 8 << 20
        let elapsed = try await Clock.seconds {
            var sent = 0
            while sent < bytesPerReceiver {
                try await waitUntil { sent - (counters.map(\.bytes).min() ?? 0) <= window - message.count }
                try sender.send(message, toPeers: targets, with: .reliable)
                sent += message.count
            }
            try await waitUntil { counters.allSatisfy { $0.bytes >= bytesPerReceiver } }
        }
        for session in everyone { await session.disconnectAndWait() }
        return Double(bytesPerReceiver * (members - 1)) / elapsed
    }
}
