import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

@Suite("Trust step (docs/PROTOCOL.md §7.3)")
struct TrustStepTests {
    static let pki = try! TestPKI()
    static let alice = try! pki.peer("alice")
    static let bob = try! pki.peer("bob")

    /// A trust decision as an app writes it: one line with TrustEvaluation.
    static func evaluator(anchors: [Certificate]) -> (PeerTrustRequest) -> TrustAnswer {
        { request in TrustEvaluation(anchors: anchors).evaluate(request.certificateChain ?? []).isTrusted ? .accept : .reject }
    }

    @Test func rejectionOnEitherSideEndsBothAndDeliversNothing() throws {
        for rejectingDialer in [true, false] {
            var pair = try MachinePair.make(dialerIdentity: Self.alice, listenerIdentity: Self.bob)
            if rejectingDialer { pair.dialerTrust = { _ in .reject } } else { pair.listenerTrust = { _ in .reject } }
            pair.run()
            let rejecter = rejectingDialer ? pair.dialerSide : pair.listenerSide
            let rejected = rejectingDialer ? pair.listenerSide : pair.dialerSide
            #expect(rejecter.closedWith == ConnectionError(.trustRejectedLocally))
            #expect(rejected.closedWith == ConnectionError(.trustRejectedByPeer(.rejected)))
            #expect(rejecter.established == nil && rejected.established == nil)
        }
    }

    @Test func noAnswerInTimeEndsBothWithATimeout() throws {
        var pair = try MachinePair.make(dialerIdentity: Self.alice, listenerIdentity: Self.bob)
        pair.listenerTrust = { _ in .never }
        pair.run()
        #expect(pair.dialerSide.established == nil)
        pair.apply(pair.listener.trustTimedOut(), fromDialer: false)
        pair.pump()
        #expect(pair.listenerSide.closedWith == ConnectionError(.trustTimedOutLocally))
        #expect(pair.dialerSide.closedWith == ConnectionError(.trustRejectedByPeer(.timedOut)))
        // A late answer after the timeout changes nothing.
        #expect(pair.listener.trustDecided(accepted: true).isEmpty)
    }

    @Test func oneSideAcceptingEarlySendsNoApplicationData() throws {
        var pair = try MachinePair.make(dialerIdentity: Self.alice, listenerIdentity: Self.bob)
        pair.listenerTrust = { _ in .never }
        pair.run()
        // The dialer accepted; the listener is still deciding. Neither may send application data.
        #expect(throws: SendRefusal.notConnected) { try pair.dialer.send(.message(ByteBuffer(string: "early"), isEnd: true)) }
        #expect(throws: SendRefusal.notConnected) { try pair.listener.send(.message(ByteBuffer(string: "early"), isEnd: true)) }
        pair.apply(pair.listener.trustDecided(accepted: true), fromDialer: false)
        pair.pump()
        #expect(pair.dialerSide.established != nil && pair.listenerSide.established != nil)
    }

    @Test func applicationFramesBeforeTrustAreAViolation() throws {
        // Plaintext so the test can inject raw frames as a malicious peer would.
        var pair = try MachinePair.make(dialerPreference: .none, listenerPreference: .none)
        pair.listenerTrust = { _ in .never }
        pair.dialerTrust = { _ in .never }
        pair.run()
        var frame = ByteBuffer()
        try Frame.message(ByteBuffer(string: "sneaky"), isEnd: true).encode(into: &frame)
        pair.inject(Array(frame.readableBytesView), fromDialer: true)
        #expect(pair.listenerSide.delivered.isEmpty)
        guard pair.listenerSide.closedWith?.code == .protocolViolation else {
            Issue.record("expected a protocol violation, got \(String(describing: pair.listenerSide.closedWith))")
            return
        }
    }

    @Test func theAppSeesPeerIDAndChainAndDecidesWithTrustEvaluation() throws {
        var pair = try MachinePair.make(dialerIdentity: Self.alice, listenerIdentity: Self.bob)
        pair.dialerTrust = Self.evaluator(anchors: [Self.pki.root])
        pair.listenerTrust = Self.evaluator(anchors: [Self.pki.root])
        pair.run()
        #expect(pair.dialerSide.established != nil && pair.listenerSide.established != nil)
        let request = try #require(pair.listenerSide.trustRequests.first)
        #expect(request.peer == alicePeer)
        #expect(request.certificateChain?.first?.subjectCommonName == "alice")
        #expect(request.certificateChain?.count == 2)
    }

    @Test(arguments: ["expired", "notYetValid", "unknownCA", "selfSigned", "caLeaf", "twoCommonNames"])
    func badCertificatesAreRejectedByTheEvaluator(kind: String) throws {
        let bad: SecurityIdentity
        switch kind {
        case "caLeaf": bad = try Self.pki.peer("mallory") { $0.marksPeerAsCertificateAuthority = true }
        case "twoCommonNames": bad = try Self.pki.peer("bob") { $0.additionalCommonNames = ["mallory"] }
        case "expired": bad = try Self.pki.peer("mallory", notValidBefore: .init(timeIntervalSinceNow: -7200), notValidAfter: .init(timeIntervalSinceNow: -3600))
        case "notYetValid": bad = try Self.pki.peer("mallory", notValidBefore: .init(timeIntervalSinceNow: 3600), notValidAfter: .init(timeIntervalSinceNow: 7200))
        case "unknownCA": bad = try TestPKI(name: "Rogue").peer("mallory")
        default:
            let key = try PrivateKey.generate()
            bad = try SecurityIdentity(privateKey: key, certificateChain: [try CertificateBuilder(commonName: "mallory").issue(for: key)])
        }
        var pair = try MachinePair.make(dialerIdentity: bad, listenerIdentity: Self.bob)
        pair.listenerTrust = Self.evaluator(anchors: [Self.pki.root])
        pair.run()
        #expect(pair.listenerSide.closedWith == ConnectionError(.trustRejectedLocally))
        #expect(pair.dialerSide.closedWith == ConnectionError(.trustRejectedByPeer(.rejected)))
    }

    @Test func admissionRefusalIsReportedToTheDialer() throws {
        var pair = try MachinePair.make(admission: { hello in hello.token == Bytes16(high: 9, low: 9) ? .admit : .refuse(.unknownToken) })
        pair.run()
        #expect(pair.listenerSide.closedWith == ConnectionError(.notAdmitted(.unknownToken)))
        #expect(pair.dialerSide.closedWith == ConnectionError(.peerSaidGoodbye(.unknownToken)))
        #expect(pair.listenerSide.trustRequests.isEmpty)
    }

    @Test func keyUpdateAtALowLimitKeepsDataFlowing() throws {
        var pair = try MachinePair.make(recordsPerKeyUpdate: 2)
        pair.run()
        var expected: [Frame] = []
        for index in 0..<30 {
            let frame = Frame.message(ByteBuffer(repeating: UInt8(index), count: 40_000), isEnd: true)
            expected.append(frame)
            try pair.send(frame, fromDialer: true)
            try pair.send(.ping(UInt64(index)), fromDialer: false)
        }
        let messages = pair.listenerSide.delivered.filter { $0.type == .message }
        #expect(messages.count == expected.count)
        #expect(messages == expected, "messages differ")
        #expect(pair.listenerSide.delivered.filter { $0.type == .pong }.count == 30)
        let engine = try #require(pair.dialer.tlsEngine)
        #expect(engine.keyUpdatesInitiated >= 30)
        #expect(try #require(pair.listener.tlsEngine).keyUpdatesReceived >= 30)
    }

    @Test func pingIsAnsweredAndGoodbyeEndsTheConnection() throws {
        var pair = try MachinePair.make()
        pair.run()
        try pair.send(.ping(42), fromDialer: false)
        #expect(pair.listenerSide.delivered == [.pong(42)])
        pair.apply(pair.dialer.disconnect(), fromDialer: true)
        pair.pump()
        #expect(pair.dialerSide.closedWith == ConnectionError(.closedLocally))
        #expect(pair.listenerSide.closedWith == ConnectionError(.peerSaidGoodbye(.normal)))
    }
}

/// Admission is an action out and an answer back (docs/PROTOCOL.md §7.1): the listener's
/// machine never calls into the session while it reads, and reads nothing past the dialer's
/// HELLO until the session has answered.
@Suite("Admission step")
struct AdmissionStepTests {
    @Test(arguments: [true, false])
    func theListenerReadsNothingPastHelloUntilTheSessionAnswers(admit: Bool) throws {
        var pair = try MachinePair.make(dialerIdentity: TrustStepTests.alice, listenerIdentity: TrustStepTests.bob)
        pair.defersAdmission = true
        pair.run()
        #expect(pair.listenerSide.admissionRequests.map(\.peerID) == [alicePeer])
        // The dialer's pairing commitment, sent right after its HELLO, waits unread.
        #expect(pair.listener.establishmentProgress == 2)
        #expect(pair.listenerSide.trustRequests.isEmpty && pair.dialerSide.trustRequests.isEmpty)
        pair.inject([], fromDialer: true)
        #expect(pair.listenerSide.admissionRequests.count == 1)
        pair.apply(pair.listener.admitted(admit ? .admit : .refuse(.sessionFull)), fromDialer: false)
        pair.pump()
        pair.deliverTransportCloses()
        if admit {
            #expect(pair.listenerSide.established != nil && pair.dialerSide.established != nil)
        } else {
            #expect(pair.listenerSide.closedWith == ConnectionError(.notAdmitted(.sessionFull)))
            #expect(pair.dialerSide.closedWith == ConnectionError(.peerSaidGoodbye(.sessionFull)))
            #expect(pair.listenerSide.trustRequests.isEmpty)
        }
        // A second answer changes nothing.
        #expect(pair.listener.admitted(.admit).isEmpty)
    }
}
