import MultipeerCrypto
import MultipeerWire
import NIOCore
import MultipeerProtocol
import ProtocolTestSupport

/// One state machine, connected in plaintext to a peer that the test plays by hand: frames go in
/// encoded, and what the machine sends comes back decoded.
struct ScriptedConnection {
    var machine: ConnectionStateMachine
    /// Frames the machine sent since the last `takeSent()`.
    private(set) var sent: [Frame] = []
    private(set) var delivered: [Frame] = []
    private(set) var closedWith: ConnectionError?
    private var outbound = FrameDecoder()
    /// Whether the machine is the listener, so that the scripted peer is the dialer (odd channels).
    let machineIsListener: Bool

    init(machineIsListener: Bool = true) throws {
        self.machineIsListener = machineIsListener
        let local = machineIsListener ? bobPeer : alicePeer
        let peer = machineIsListener ? alicePeer : bobPeer
        machine = try ConnectionStateMachine(configuration: ConnectionConfiguration(
            role: machineIsListener ? .listener : .dialer, localPeer: local, encryptionPreference: .none,
            tls: try TLSContext(identity: nil)))
        // The scripted peer speaks the machine's highest version, as a peer of this release does.
        let preamble = try Preamble(maxVersion: WireLimits.maxProtocolVersion, encryptionPreference: .none, hasIdentity: false)
        _ = machine.start()  // a dialer's preamble, which is no frame
        var bytes = ByteBuffer()
        preamble.encode(into: &bytes)
        var actions = machine.receive(bytes)
        // A listener answers the dialer's preamble with its own, which is no frame either.
        if machineIsListener, case .send = actions.first { actions.removeFirst() }
        apply(actions)
        let hello = try Hello(
            version: WireLimits.maxProtocolVersion, purpose: machineIsListener ? .connectionData : .answer, preambleEcho: Hello.echo(dialer: preamble, listener: preamble),
            listenPort: 0, datagramPort: 0, datagramReceiverID: 0, peerID: peer)
        // The pairing exchange (docs/PROTOCOL.md §7.3), with a fixed nonce for the scripted peer.
        let nonce = try PairingNonce(bytes: [UInt8](repeating: 7, count: 32))
        if machineIsListener {
            try receive([.hello(hello), .pairingCommit(try SHA256Digest(bytes: PairingCode.commitment(to: nonce.bytes)))])
            try receive([.pairingNonce(nonce)])
        } else {
            try receive([.hello(hello), .pairingNonce(nonce)])
        }
        apply(machine.trustDecided(accepted: true))
        try receive([.trust(.accepted)])
        precondition(machine.isConnected, "the scripted handshake did not connect: \(String(describing: closedWith))")
        _ = takeSent()
    }

    /// Feeds the frames in one read, as one batch of bytes.
    mutating func receive(_ frames: [Frame]) throws {
        var bytes = ByteBuffer()
        for frame in frames { try frame.encode(into: &bytes) }
        apply(machine.receive(bytes))
    }

    /// Sends the frames as the session would; throws the machine's refusal.
    mutating func send(_ frames: [Frame]) throws(SendRefusal) {
        for frame in frames { apply(try machine.send(frame)) }
    }

    mutating func takeDelivered() -> [Frame] {
        defer { delivered.removeAll() }
        return delivered
    }

    mutating func takeSent() -> [Frame] {
        defer { sent.removeAll() }
        return sent
    }

    var isConnected: Bool { machine.isConnected }

    /// The GOODBYE reason the machine sent, if its last frame was one.
    var goodbye: GoodbyeReason? {
        if case .goodbye(let reason) = sent.last { return reason }
        return nil
    }

    private mutating func apply(_ actions: [ConnectionAction]) {
        for action in actions {
            switch action {
            case .send(let bytes):
                outbound.append(bytes)
                while let frame = try! outbound.nextFrame() { sent.append(frame) }
            case .deliver(let frame): delivered.append(frame)
            case .close(let error): closedWith = error
            case .admissionRequested: apply(machine.admitted(.admit))
            case .evaluateTrust, .established, .invitationReceived, .awaitingInvitationAnswer, .invitationAnswered: break
            }
        }
    }
}
