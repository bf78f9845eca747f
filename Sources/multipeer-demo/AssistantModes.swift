import Foundation
import MultipeerConnectivity
import MultipeerDiscovery
import Synchronization
import MultipeerProtocol

/// `multipeer-demo assistant INTERFACE`: an advertiser assistant whose prompt accepts "host" and
/// declines "stranger", another with no prompt (which accepts), and browser models inviting through them, found
/// over mDNS on INTERFACE (run it inside a network namespace); one line per scenario:
/// `OK <scenario> <detail>` or `FAIL <scenario> <detail>`.
extension Demo {
    /// Records what the delegates were told, in order.
    final class Calls: MCAdvertiserAssistantDelegate, MCBrowserModelDelegate, Sendable {
        let log = Mutex<[String]>([])

        func add(_ entry: String) { log.withLock { $0.append(entry) } }
        var entries: [String] { log.withLock { $0 } }

        func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) { add("will") }
        func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) { add("did") }
        func browserViewControllerDidFinish(_ browserViewController: MCBrowserModel) { add("finished") }
        func browserViewControllerWasCancelled(_ browserViewController: MCBrowserModel) { add("cancelled") }
    }

    /// `peer`'s row in `snapshot`, if listed.
    static func row(_ snapshot: MCBrowserModel.Snapshot?, _ peer: MCPeerID) -> MCBrowserModel.Peer? {
        snapshot?.peers.first { $0.peerID == peer }
    }

    static func assistantScenarios(interface: String) async throws {
        let configuration = DiscoveryConfiguration(interfaceNames: [interface])
        var failed: [String] = []
        func report(_ ok: Bool, _ scenario: String, _ detail: String) {
            print("\(ok ? "OK" : "FAIL") \(scenario) \(detail)")
            if !ok { failed.append(scenario) }
        }
        func session(_ name: String) -> MCSession {
            MCSession(peer: MCPeerID(displayName: name), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        }
        /// The first snapshot that satisfies `match` within `seconds`, or nil.
        func first(_ model: MCBrowserModel, seconds: Int, _ match: @escaping @Sendable (MCBrowserModel.Snapshot) -> Bool) async -> MCBrowserModel.Snapshot? {
            try? await within(seconds: seconds) {
                for await snapshot in model.snapshots() where match(snapshot) { return snapshot }
                throw MCError(.cancelled)
            }
        }

        let guest = session("guest")
        let presented = Calls()
        let assistant = try MCAdvertiserAssistant(
            serviceType: "mpc-assist", discoveryInfo: ["room": "demo"], session: guest, configuration: configuration, listenHost: "127.0.0.1")
        assistant.delegate = presented
        assistant.prompt = { invitation in
            presented.add("prompt \(invitation.peerID.displayName) \(String(decoding: invitation.context ?? Data(), as: UTF8.self))")
            return invitation.peerID.displayName == "host"
        }
        let unattended = session("unattended")
        let silentAssistant = try MCAdvertiserAssistant(
            serviceType: "mpc-assist", discoveryInfo: nil, session: unattended, configuration: configuration, listenHost: "127.0.0.1")
        let unattendedCalls = Calls()
        silentAssistant.delegate = unattendedCalls
        try await assistant.startAdvertising()
        try await silentAssistant.startAdvertising()

        let host = session("host")
        let stranger = session("stranger")
        let hostModel = try MCBrowserModel(serviceType: "mpc-assist", session: host, configuration: configuration)
        let strangerModel = try MCBrowserModel(serviceType: "mpc-assist", session: stranger, configuration: configuration)
        let hostCalls = Calls()
        let strangerCalls = Calls()
        hostModel.delegate = hostCalls
        strangerModel.delegate = strangerCalls
        // Room for the host and one guest only.
        hostModel.maximumNumberOfPeers = 2
        try await hostModel.start()
        try await strangerModel.start()

        let (guestID, unattendedID) = (guest.myPeerID, unattended.myPeerID)
        var seen = await first(hostModel, seconds: 10) { row($0, guestID) != nil && row($0, unattendedID) != nil }
        report(
            row(seen, guestID)?.state == .found && row(seen, guestID)?.discoveryInfo == ["room": "demo"] && row(seen, unattendedID)?.canInvite == true,
            "found", "host lists \(seen?.peers.map(\.peerID.displayName) ?? [])")
        report(hostModel.done() == false && hostCalls.entries.isEmpty, "done-unavailable", "canFinish \(hostModel.snapshot.canFinish) with nobody connected")

        // The prompt accepts the host: the guest joins the host's session.
        let sent = hostModel.invite(guestID, context: Data("from host".utf8), timeout: 10)
        seen = await first(hostModel, seconds: 15) { row($0, guestID)?.state == .connected }
        // The inviter returns once it is connected; the guest's session may take a moment more.
        let joined: Void? = try? await within(seconds: 5) {
            while guest.connectedPeers != [host.myPeerID] { try await Task.sleep(for: .milliseconds(5)) }
        }
        report(sent && seen != nil && joined != nil, "accept", "guest is \(row(hostModel.snapshot, guestID).map { "\($0.state)" } ?? "gone") in the host's list")

        // Maximum 2: with the guest in, nobody else can be invited.
        report(
            row(hostModel.snapshot, unattendedID)?.canInvite == false && !hostModel.invite(unattendedID),
            "maximum", "unattended canInvite \(row(hostModel.snapshot, unattendedID)?.canInvite.description ?? "unlisted")")

        // The prompt declines the stranger.
        _ = await first(strangerModel, seconds: 10) { row($0, guestID)?.canInvite == true }
        let strangerSent = strangerModel.invite(guestID, context: nil, timeout: 10)
        seen = await first(strangerModel, seconds: 15) { row($0, guestID)?.state == .declined }
        report(strangerSent && seen != nil && !guest.connectedPeers.contains(stranger.myPeerID), "decline", "guest is \(row(strangerModel.snapshot, guestID).map { "\($0.state)" } ?? "gone") in the stranger's list")

        let expected = ["will", "prompt host from host", "did", "will", "prompt stranger ", "did"]
        report(presented.entries == expected, "presented", "\(presented.entries)")

        // An assistant without a prompt accepts (the default policy), and tells its delegate.
        _ = await first(strangerModel, seconds: 10) { row($0, unattendedID)?.canInvite == true }
        let unattendedSent = strangerModel.invite(unattendedID, context: nil, timeout: 10)
        seen = await first(strangerModel, seconds: 15) { row($0, unattendedID)?.state == .connected }
        report(
            unattendedSent && seen != nil && unattendedCalls.entries == ["will", "did"], "no-prompt",
            "unattended is \(row(strangerModel.snapshot, unattendedID).map { "\($0.state)" } ?? "gone"), presented \(unattendedCalls.entries)")

        report(hostModel.done() && hostCalls.entries == ["finished"] && hostModel.snapshot.peers.map(\.peerID) == [guestID], "done", "host \(hostCalls.entries), lists \(hostModel.snapshot.peers.map(\.peerID.displayName))")
        strangerModel.cancel()
        // Cancel leaves the session as it is: only the peer in it stays listed.
        report(
            strangerCalls.entries == ["cancelled"] && strangerModel.snapshot.peers.map(\.peerID) == [unattendedID], "cancel",
            "stranger \(strangerCalls.entries), lists \(strangerModel.snapshot.peers.map(\.peerID.displayName))")

        await assistant.stopAdvertising()
        await silentAssistant.stopAdvertising()
        await hostModel.browser?.stop()
        await strangerModel.browser?.stop()
        for each in [host, stranger, guest, unattended] { await each.disconnectAndWait() }
        guard failed.isEmpty else { fail("assistant scenarios failed: \(failed.joined(separator: ", "))") }
        print("ASSISTANT PASSED")
    }
}
