import Foundation
import MultipeerCrypto
import MultipeerSession
import MultipeerWire
import NIOCore
import Synchronization
import MultipeerProtocol

/// Why an invitation did not make a connection (the Swift-native API's error).
public struct MCInvitationError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Reason: Hashable, Sendable {
        case declined
        /// The invitee did not answer within the timeout, or the connection after an
        /// acceptance did not complete in time.
        case timedOut
        /// The session the invitee chose has 8 members already.
        case sessionFull
        /// The invitee's chosen session and ours cannot agree on encryption.
        case encryptionIncompatible
        /// The invitee could not be reached (not found by this browser, or no address answered).
        case unreachable
        /// Accepted, but the session connection failed (trust rejected, a wrong certificate, ...).
        case connectionFailed
    }

    public let reason: Reason
    public let detail: String

    public init(_ reason: Reason, _ detail: String = "") {
        self.reason = reason
        self.detail = detail
    }

    public var description: String { detail.isEmpty ? "invitation: \(reason)" : "invitation: \(reason): \(detail)" }
}

extension MCSession {
    /// Invites a peer found by discovery into this session (docs/PROTOCOL.md §7.2). Reports the
    /// peer `connecting` at once, then `connected` or `notConnected` (with the reason in
    /// `events()` as `.connectionFailed`), as Apple's session does for an invitation.
    func invite(_ peer: MCPeerID, at addresses: [SocketAddress], context: Data, timeout: TimeInterval) async throws(MCInvitationError) {
        guard let engine else { throw MCInvitationError(.unreachable, setupError?.reason ?? "the session is unusable") }
        guard !connectedPeers.contains(peer) else { return }
        let milliseconds = UInt32(clamping: Int64((timeout > 0 ? timeout : 30) * 1000))
        remember(peer)
        let events = self.events()
        beginInvitation(peer)
        let outcome: InvitationOutcome
        do {
            outcome = try await engine.invite(
                peer.wire, at: addresses, context: ByteBuffer(bytes: context),
                timeoutMilliseconds: min(max(milliseconds, 1), WireLimits.invitationTimeoutMilliseconds.upperBound)).get()
        } catch {
            endInvitation(peer, failed: MCError(.invalidParameter, reason: "\(error)"))
            throw MCInvitationError(.unreachable, "\(error)")
        }
        let failure: MCInvitationError? = switch outcome {
        case .accepted: nil
        case .declined: MCInvitationError(.declined)
        case .timedOut: MCInvitationError(.timedOut)
        case .sessionFull: MCInvitationError(.sessionFull)
        case .encryptionIncompatible: MCInvitationError(.encryptionIncompatible)
        case .unreachable(let why): MCInvitationError(.unreachable, why)
        case .invalidAnswer(let why): MCInvitationError(.connectionFailed, why)
        }
        if let failure {
            endInvitation(peer, failed: MCError(.notConnected, reason: failure.description))
            throw failure
        }
        // Accepted: the session dials the invitee; wait for it to connect or fail.
        let deadline = Duration.nanoseconds(InvitationTiming.connectionAfterAcceptance(
            handshakeTimeout: TimeAmount(configuration.handshakeTimeout),
            trustTimeout: TimeAmount(configuration.certificateDecisionTimeout)).nanoseconds)
        let connected: Bool
        do {
            connected = try await withDeadline(deadline) {
                for await event in events {
                    guard case .peerStateChanged(let changed, let state) = event, changed == peer else { continue }
                    if state == .connected { return true }
                    if state == .notConnected { return false }
                }
                return false
            }
        } catch {
            throw MCInvitationError(.timedOut, "accepted, but the connection did not complete in time")
        }
        guard connected else { throw MCInvitationError(.connectionFailed, "accepted, but the connection failed") }
    }

    /// What an advertiser's `Advertiser` core checks an invitation into this session against
    /// (docs/PROTOCOL.md §7.2); nil when the session is unusable.
    var invitingSession: InvitingSession? {
        guard let engine,
            let preamble = try? Preamble(encryptionPreference: encryptionPreference.wire, hasIdentity: engine.configuration.tls.identity != nil)
        else { return nil }
        return InvitingSession(members: connectedPeers.count, preamble: preamble)
    }

    /// The advertiser's side, once the core let the inviter in: connection data made for it.
    func connectionData(forInviter inviter: WirePeerID) async -> ConnectionData? {
        guard let engine else { return nil }
        remember(mcPeer(inviter))
        return try? await engine.connectionData(forPeer: inviter.identifier).get()
    }
}

/// Runs `body` with a deadline; throws when it passes first.
private func withDeadline<T: Sendable>(_ duration: Duration, _ body: @escaping @Sendable () async -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: duration)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw MCError(.timedOut) }
        return value
    }
}
