import Foundation
import MultipeerDiscovery
import MultipeerTestSupport
import Synchronization
import Testing
@testable import MultipeerConnectivity
import MultipeerProtocol

/// How the advertiser assistant answers one invitation, without sockets: the invitation's
/// answer is recorded instead of sent.
@Suite("Advertiser assistant: the prompt decides, or the default accepts")
struct AdvertiserAssistantTests {
    /// The delegate's calls and the prompt's questions, in order.
    final class Journal: MCAdvertiserAssistantDelegate, Sendable {
        let entries = Mutex<[String]>([])
        func add(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }

        func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) { add("will") }
        func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) { add("did") }
    }

    /// What an invitation was answered with: the session joined, or nil for declined.
    final class Answer: Sendable {
        let given = Mutex<[MCSession?]>([])
        func invitation(from peer: MCPeerID, context: Data = Data()) -> MCInvitation {
            MCInvitation(peer: peer, context: context) { session in self.given.withLock { $0.append(session) } }
        }
        var all: [MCSession?] { given.withLock { $0 } }
    }

    let session = MCSession(peer: MCPeerID(displayName: "guest"))
    let journal = Journal()
    let answer = Answer()
    let assistant: MCAdvertiserAssistant
    let inviter = MCPeerID(displayName: "host")

    init() throws {
        assistant = try MCAdvertiserAssistant(serviceType: "mpc-assist", discoveryInfo: nil, session: session, configuration: DiscoveryConfiguration())
        assistant.delegate = journal
    }

    @Test func acceptedInvitationsJoinTheAssistantsSession() async {
        let journal = journal
        assistant.prompt = { invitation in
            journal.add("prompt \(invitation.peerID.displayName) \(String(decoding: invitation.context ?? Data(), as: UTF8.self))")
            return true
        }
        await assistant.answer(answer.invitation(from: inviter, context: Data("hello".utf8)))
        #expect(journal.all == ["will", "prompt host hello", "did"])
        #expect(answer.all.count == 1 && answer.all.first! === session)
    }

    @Test func declinedInvitationsAreDeclinedAfterThePrompt() async {
        let journal = journal
        assistant.prompt = { invitation in
            journal.add("prompt \(invitation.context == nil ? "without context" : "with context")")
            return false
        }
        await assistant.answer(answer.invitation(from: inviter))
        #expect(journal.all == ["will", "prompt without context", "did"])
        #expect(answer.all.count == 1 && answer.all.first! == nil)
    }

    /// Apple's alert asks a person; an app ported without a prompt accepts, as the person
    /// tapping Accept would, instead of refusing everyone in silence. The session's log says so.
    @Test func withoutAPromptEveryInvitationIsAcceptedAndPresented() async throws {
        let capture = LogCapture()
        var configuration = MCSessionConfiguration()
        configuration.logger = capture.logger("guest")
        let session = MCSession(peer: MCPeerID(displayName: "guest"), securityIdentity: nil, encryptionPreference: .optional, configuration: configuration)
        let unattended = try MCAdvertiserAssistant(
            serviceType: "mpc-assist", discoveryInfo: nil, session: session, configuration: DiscoveryConfiguration())
        unattended.delegate = journal
        #expect(unattended.prompt == nil)
        await unattended.answer(answer.invitation(from: inviter))
        #expect(journal.all == ["will", "did"])
        #expect(answer.all.count == 1 && answer.all.first! === session)
        #expect(capture.all.contains { $0.hasPrefix("notice advertiser assistant: accepted an invitation without a prompt peer=host [") })
    }

    @Test func aPromptThatRefusesEveryoneDeclines() async {
        assistant.prompt = { _ in false }
        await assistant.answer(answer.invitation(from: inviter))
        #expect(journal.all == ["will", "did"])
        #expect(answer.all.count == 1 && answer.all.first! == nil)
    }

    @Test func stoppingWhileThePromptAsksDeclinesWhateverItSays() async throws {
        let (asked, askedContinuation) = AsyncStream<Void>.makeStream()
        let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
        assistant.prompt = { _ in
            askedContinuation.yield()
            for await _ in release { break }
            return true
        }
        let (assistant, invitation) = (assistant, answer.invitation(from: inviter))
        let answering = Task { await assistant.answer(invitation) }
        _ = try await firstMatch(in: asked, seconds: 5) { _ in true }
        answering.cancel()
        releaseContinuation.yield()
        try await withDeadline(seconds: 5) { await answering.value }
        #expect(journal.all == ["will", "did"])
        #expect(answer.all.count == 1 && answer.all.first! == nil)
    }
}
