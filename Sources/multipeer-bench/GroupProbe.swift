import Foundation
import Logging
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerTestSupport
import Synchronization

extension Scenarios {
    /// The key exchange group of one more establishment, untimed, as the sessions' handshake
    /// logs it at debug level ("TLS handshake complete", metadata `group`); nil if the log did
    /// not say. Both sessions log, so both must agree.
    static func establishmentGroup(identities: (SecurityIdentity, SecurityIdentity), anchor: Certificate) async throws -> String? {
        let heard = HeardGroups()
        func session(_ name: String, _ identity: SecurityIdentity) -> MCSession {
            var configuration = MCSessionConfiguration.loopbackOnly
            // Keeps the `group` of each "TLS handshake complete" line and drops every other line.
            var logger = Logger(label: "multipeer-bench") { _ in
                EventLogHandler { event in
                    guard event.message.description == "TLS handshake complete", let group = event.metadata?["group"] else { return }
                    heard.append(group.description)
                }
            }
            logger.logLevel = .debug
            configuration.logger = logger
            let session = MCSession(peer: MCPeerID(displayName: name), securityIdentity: [SecIdentity(identity)],
                                    encryptionPreference: .required, configuration: configuration)
            session.setCertificateEvaluator { _, certificates in
                TrustEvaluation(anchors: [anchor]).evaluate(certificates?.map(\.certificate) ?? []).isTrusted
            }
            return session
        }
        let a = session("a", identities.0)
        let b = session("b", identities.1)
        b.connectPeer(a.myPeerID, withNearbyConnectionData: try await a.nearbyConnectionData(forPeer: b.myPeerID))
        try await waitUntil { a.connectedPeers.count == 1 && b.connectedPeers.count == 1 }
        await a.disconnectAndWait()
        await b.disconnectAndWait()
        let groups = Set(heard.groups)
        guard groups.count <= 1 else { throw BenchFailure("the two sides logged different groups: \(groups.sorted())") }
        return groups.first
    }
}

struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The groups the sessions' handshakes logged.
final class HeardGroups: Sendable {
    private let heard = Mutex<[String]>([])
    var groups: [String] { heard.withLock { $0 } }
    func append(_ group: String) { heard.withLock { $0.append(group) } }
}
