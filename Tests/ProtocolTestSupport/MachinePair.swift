import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
@testable import MultipeerProtocol

/// What one side saw of its connection.
package struct SideOutcome {
    package var established: EstablishedConnection?
    package var closedWith: ConnectionError?
    package var trustRequests: [PeerTrustRequest] = []
    package var delivered: [Frame] = []
    package var invitations: [InvitationRequest] = []
    package var invitationAnswers: [InvitationAnswer] = []
    package var awaitingAnswerMilliseconds: UInt32?
    package var admissionRequests: [Hello] = []
}

/// How a side answers the trust question: accept, reject, or never answer.
package enum TrustAnswer { case accept, reject, never }

/// Two state machines wired back to back in memory, with an optional man in the middle that may
/// rewrite bytes in flight (per direction, with the byte offset of that direction's stream).
package struct MachinePair {
    package var dialer: ConnectionStateMachine
    package var listener: ConnectionStateMachine
    package var dialerSide = SideOutcome()
    package var listenerSide = SideOutcome()
    package var dialerTrust: (PeerTrustRequest) -> TrustAnswer = { _ in .accept }
    package var listenerTrust: (PeerTrustRequest) -> TrustAnswer = { _ in .accept }
    /// (fromDialer, offset, bytes) -> bytes actually delivered.
    package var tamper: ((Bool, Int, [UInt8]) -> [UInt8])?
    /// Every byte each side put on the wire, for taps.
    package var wireFromDialer: [UInt8] = []
    package var wireFromListener: [UInt8] = []

    private var toListener: [ByteBuffer] = []
    private var toDialer: [ByteBuffer] = []
    private var dialerOpen = true
    private var listenerOpen = true

    /// The listener's session: whether the dialer's HELLO may join.
    package var admission: (Hello) -> ConnectionConfiguration.Admission
    /// Leave admission requests unanswered; the test answers with `listener.admitted`.
    package var defersAdmission = false

    package init(
        dialer: ConnectionConfiguration, listener: ConnectionConfiguration,
        admission: @escaping (Hello) -> ConnectionConfiguration.Admission = { _ in .admit }
    ) throws {
        self.dialer = try ConnectionStateMachine(configuration: dialer)
        self.listener = try ConnectionStateMachine(configuration: listener)
        self.admission = admission
    }

    package static func make(
        dialerPreference: WireEncryptionPreference = .required, dialerIdentity: SecurityIdentity? = nil,
        listenerPreference: WireEncryptionPreference = .required, listenerIdentity: SecurityIdentity? = nil,
        recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate,
        admission: @escaping @Sendable (Hello) -> ConnectionConfiguration.Admission = { _ in .admit }
    ) throws -> MachinePair {
        try MachinePair(
            dialer: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: dialerPreference,
                tls: try TLSContext(identity: dialerIdentity), token: Bytes16(high: 1, low: 2),
                datagramPort: 40_001, datagramReceiverID: 7, recordsPerKeyUpdate: recordsPerKeyUpdate),
            listener: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: listenerPreference,
                tls: try TLSContext(identity: listenerIdentity), listenPort: 40_000,
                recordsPerKeyUpdate: recordsPerKeyUpdate), admission: admission)
    }

    package mutating func run() {
        apply(dialer.start(), fromDialer: true)
        apply(listener.start(), fromDialer: false)
        pump()
    }

    /// Delivers queued bytes until both directions are quiet.
    package mutating func pump() {
        var rounds = 0
        while (!toListener.isEmpty || !toDialer.isEmpty) && rounds < 1_000 {
            rounds += 1
            if !toListener.isEmpty {
                let bytes = toListener.removeFirst()
                if listenerOpen { apply(listener.receive(bytes), fromDialer: false) }
            }
            if !toDialer.isEmpty {
                let bytes = toDialer.removeFirst()
                if dialerOpen { apply(dialer.receive(bytes), fromDialer: true) }
            }
        }
    }

    package mutating func send(_ frame: Frame, fromDialer: Bool) throws {
        let actions = fromDialer ? try dialer.send(frame) : try listener.send(frame)
        apply(actions, fromDialer: fromDialer)
        pump()
    }

    /// Puts raw bytes on the wire as if the given side had sent them (for protocol abuse tests).
    package mutating func inject(_ bytes: [UInt8], fromDialer: Bool) {
        if fromDialer { toListener.append(ByteBuffer(bytes: bytes)) } else { toDialer.append(ByteBuffer(bytes: bytes)) }
        pump()
    }

    package mutating func apply(_ actions: [ConnectionAction], fromDialer: Bool) {
        for action in actions {
            switch action {
            case .send(let bytes):
                var raw = Array(bytes.readableBytesView)
                let offset = fromDialer ? wireFromDialer.count : wireFromListener.count
                if fromDialer { wireFromDialer += raw } else { wireFromListener += raw }
                if let tamper { raw = tamper(fromDialer, offset, raw) }
                if fromDialer { toListener.append(ByteBuffer(bytes: raw)) } else { toDialer.append(ByteBuffer(bytes: raw)) }
            case .evaluateTrust(let request):
                let answer = fromDialer ? dialerTrust(request) : listenerTrust(request)
                if fromDialer { dialerSide.trustRequests.append(request) } else { listenerSide.trustRequests.append(request) }
                switch answer {
                case .accept: apply(fromDialer ? dialer.trustDecided(accepted: true) : listener.trustDecided(accepted: true), fromDialer: fromDialer)
                case .reject: apply(fromDialer ? dialer.trustDecided(accepted: false) : listener.trustDecided(accepted: false), fromDialer: fromDialer)
                case .never: break
                }
            case .established(let connection):
                if fromDialer { dialerSide.established = connection } else { listenerSide.established = connection }
            case .deliver(let frame):
                if fromDialer { dialerSide.delivered.append(frame) } else { listenerSide.delivered.append(frame) }
            case .invitationReceived(let request):
                if fromDialer { dialerSide.invitations.append(request) } else { listenerSide.invitations.append(request) }
            case .awaitingInvitationAnswer(let milliseconds):
                if fromDialer { dialerSide.awaitingAnswerMilliseconds = milliseconds } else { listenerSide.awaitingAnswerMilliseconds = milliseconds }
            case .admissionRequested(let hello):
                if fromDialer { dialerSide.admissionRequests.append(hello) } else { listenerSide.admissionRequests.append(hello) }
                if defersAdmission { continue }
                let decision = admission(hello)
                apply(fromDialer ? dialer.admitted(decision) : listener.admitted(decision), fromDialer: fromDialer)
            case .invitationAnswered(let answer):
                if fromDialer { dialerSide.invitationAnswers.append(answer) } else { listenerSide.invitationAnswers.append(answer) }
            case .close(let error):
                if fromDialer {
                    dialerSide.closedWith = error
                    dialerOpen = false
                } else {
                    listenerSide.closedWith = error
                    listenerOpen = false
                }
            }
        }
    }

    /// The other side learns of a close when its transport ends.
    package mutating func deliverTransportCloses() {
        if !dialerOpen, listenerSide.closedWith == nil { apply(listener.transportClosed(), fromDialer: false) }
        if !listenerOpen, dialerSide.closedWith == nil { apply(dialer.transportClosed(), fromDialer: true) }
    }
}

package let alicePeer = try! WirePeerID(identifier: Bytes16(high: 0xA11CE, low: 1), displayName: "alice")
package let bobPeer = try! WirePeerID(identifier: Bytes16(high: 0xB0B, low: 2), displayName: "bob")
