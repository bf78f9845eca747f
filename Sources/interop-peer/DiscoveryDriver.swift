import Foundation
import MultipeerConnectivity
import MultipeerDiscovery
import Synchronization
import MultipeerProtocol

/// ADVERTISE, BROWSE, INVITE and ANSWER (Interop/HARNESS.md): the session's advertiser and
/// browser, on the one interface `--interface` names.
final class DiscoveryDriver: Sendable {
    private struct State {
        var advertiser: MCNearbyServiceAdvertiser?
        var browser: MCNearbyServiceBrowser?
        /// Invitations printed and not yet answered, by their number.
        var unanswered: [Int: MCInvitation] = [:]
        var invitationCount = 0
    }

    private let session: MCSession
    private let out: LineWriter
    private let configuration: DiscoveryConfiguration
    private let listenHost: String
    private let state = Mutex(State())
    private static let maximumUnanswered = 256

    init(session: MCSession, out: LineWriter, interface: String, listenHost: String) {
        self.session = session
        self.out = out
        // Always the embedded engine: a host's avahi-daemon, reached over D-Bus, would publish
        // outside the network namespace the test runs in.
        configuration = DiscoveryConfiguration(interfaceNames: [interface], engine: .embedded)
        self.listenHost = listenHost
    }

    func advertise(_ service: String) async {
        guard state.withLock({ $0.advertiser == nil }) else { return out.line("ERROR ADVERTISE unavailable") }
        do {
            let advertiser = try MCNearbyServiceAdvertiser(
                peer: session.myPeerID, discoveryInfo: nil, serviceType: service, configuration: configuration, listenHost: listenHost)
            // Subscribed before it starts, so that no invitation can come first.
            let invitations = advertiser.invitations()
            try await advertiser.start()
            state.withLock { $0.advertiser = advertiser }
            Task { for await invitation in invitations { self.received(invitation) } }
            out.line("OK ADVERTISE")
        } catch {
            out.line("ERROR ADVERTISE \(Format.reason(error))")
        }
    }

    func stopAdvertising() async {
        let advertiser = state.withLock { state in
            defer { state.advertiser = nil }
            return state.advertiser
        }
        await advertiser?.stop()
        out.line("OK STOP-ADVERTISING")
    }

    func browse(_ service: String) async {
        guard state.withLock({ $0.browser == nil }) else { return out.line("ERROR BROWSE unavailable") }
        do {
            let browser = try MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: service, configuration: configuration)
            let events = browser.events()
            try await browser.start()
            state.withLock { $0.browser = browser }
            Task { await self.report(events) }
            out.line("OK BROWSE")
        } catch {
            out.line("ERROR BROWSE \(Format.reason(error))")
        }
    }

    func stopBrowsing() async {
        let browser = state.withLock { state in
            defer { state.browser = nil }
            return state.browser
        }
        await browser?.stop()
        out.line("OK STOP-BROWSING")
    }

    /// Runs on in the background; answers INVITED when the invitation ends.
    func invite(_ peer: MCPeerID, timeout: TimeInterval, context: Data) {
        guard let browser = state.withLock({ $0.browser }) else {
            return out.line("INVITED \(Format.peer(peer)) failed unreachable")
        }
        Task {
            do {
                try await browser.invite(peer, to: session, context: context, timeout: timeout)
                out.line("INVITED \(Format.peer(peer)) connected")
            } catch let error as MCInvitationError {
                out.line("INVITED \(Format.peer(peer)) failed \(error.reason)")
            } catch {
                out.line("INVITED \(Format.peer(peer)) failed \(Format.reason(error))")
            }
        }
    }

    func answer(_ number: Int, accept: Bool) {
        guard let invitation = state.withLock({ $0.unanswered.removeValue(forKey: number) }) else {
            return out.line("ERROR ANSWER usage")
        }
        if accept { invitation.accept(into: session) } else { invitation.decline() }
        out.line("OK ANSWER")
    }

    private func received(_ invitation: MCInvitation) {
        let number = state.withLock { state in
            state.invitationCount += 1
            state.unanswered[state.invitationCount] = invitation
            // The library times unanswered ones out; forget the oldest rather than grow without end.
            if state.unanswered.count > Self.maximumUnanswered, let oldest = state.unanswered.keys.min() {
                state.unanswered.removeValue(forKey: oldest)
            }
            return state.invitationCount
        }
        let context = invitation.context.isEmpty ? "-" : Format.hex(invitation.context)
        out.line("INVITATION \(number) \(Format.peer(invitation.peer)) \(context)")
    }

    private func report(_ events: AsyncStream<MCNearbyServiceBrowser.Event>) async {
        for await event in events {
            switch event {
            case .found(let peer, _, let endpoints):
                let places = endpoints.map { $0.host.contains(":") ? "[\($0.host)]:\($0.port)" : "\($0.host):\($0.port)" }
                out.line((["FOUND", Format.peer(peer)] + places).joined(separator: " "))
            case .lost(let peer):
                out.line("LOST \(Format.peer(peer))")
            }
        }
    }
}
