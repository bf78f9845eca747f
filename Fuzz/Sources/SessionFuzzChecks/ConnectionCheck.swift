import MultipeerCrypto
import MultipeerSession
import MultipeerWire
import NIOCore
import MultipeerProtocol

/// What one connection script did, so tests can tell that a seed reaches the state it is named for.
public struct ConnectionRun: Sendable {
    public var trustRequested = false
    public var established = false
    public var closed = false
    /// Frames the fuzzed machine delivered to the session layer.
    public var delivered = 0
    /// The script never put bytes on the wire that the counterpart did not send.
    public var untainted = true
}

extension SessionFuzzChecks {
    /// `ConnectionStateMachine` driven by events and frames (docs/PROTOCOL.md §3-§7).
    ///
    /// Input: two setup bytes (role, counterpart's trust answer and purpose, admission,
    /// encryption preferences; a GOODBYE reason for a refused admission), then operations
    /// (`ConnectionOp`). A real counterpart machine of the other role is started first, so its
    /// preamble and HELLO wait to be delivered and deep states are a few operations away.
    ///
    /// Checks, on both machines: no trap; at most one `.evaluateTrust`, `.established` and
    /// `.close`; `.established` only after the local application accepted; no `.deliver` before
    /// `.established`, and never of a handshake or control frame; `.close` ends its action list
    /// and nothing follows it; `isConnected`, `isClosed` and `send` agree with the actions.
    /// Between honest ends (nothing injected): frames arrive in order and intact (only channel
    /// frames that crossed the receiver's end of their channel may be dropped), and once all
    /// bytes are delivered and both applications accepted, both sides are established.
    @discardableResult
    public static func checkConnection(_ bytes: UnsafeRawBufferPointer) -> ConnectionRun {
        var input = FuzzInput(bytes)
        var harness = ConnectionHarness(setup: input.byte(), reason: input.byte())
        var operations = 0
        while !input.isExhausted && operations < 512 {
            operations += 1
            harness.perform(ConnectionOp(rawValue: input.byte() % ConnectionOp.count)!, &input)
        }
        harness.finish()
        return harness.run
    }

    static let dialerPeer = try! WirePeerID(identifier: Bytes16(high: 0xA11CE, low: 1), displayName: "alice")
    static let listenerPeer = try! WirePeerID(identifier: Bytes16(high: 0xB0B, low: 2), displayName: "bob")
    /// No identity: plaintext unless both sides prefer `.optional`. Made once, shared by all runs.
    static let tls = try! TLSContext(identity: nil)
}

/// The operations of a connection script, one input byte each (modulo `count`) and then arguments.
enum ConnectionOp: UInt8, CaseIterable {
    /// Everything the counterpart sent so far.
    case deliverAll
    /// Count byte: that many bytes plus one of what the counterpart sent.
    case deliverSome
    /// Length-prefixed bytes, as if from the counterpart.
    case raw
    /// A frame from fuzz-chosen fields, canonically encoded, in one or two pieces.
    case frame
    case trustDecided
    case trustTimedOut
    case handshakeTimedOut
    case peerUnresponsive
    case transportClosed
    case disconnect
    /// A frame from fuzz-chosen fields through `send(_:coalescing:)`: every second one may be
    /// held by TLS, as the connection handler asks after a burst's first frame, until a
    /// `deliverAll` or the end flushes it (replies in between seal it ahead of themselves).
    case send
    case counterpartTrustDecided
    case counterpartSend
    /// Selector byte: the counterpart disconnects, times out or loses its transport.
    case counterpartEvent
    /// Position bytes: one bit of the counterpart's undelivered bytes flipped.
    case tamper
    /// A second `start()`, which must do nothing.
    case startAgain

    static let count = UInt8(allCases.count)
}

/// What one machine's actions have said so far, checked as they come.
struct MachineObserver {
    let name: String
    var established = false
    var closed = false
    var trustRequested = false
    var locallyAccepted = false
    var admissionAsked = false
    var delivered: [Frame] = []
    /// Why the machine closed, once it did.
    var closeError: ConnectionError?

    /// The bytes the actions put on the wire, and whether the application is asked for trust.
    mutating func observe(_ actions: [ConnectionAction]) -> (bytes: [ByteBuffer], trustRequest: PeerTrustRequest?, admission: Hello?) {
        precondition(!closed || actions.isEmpty, "\(name): actions after .close")
        var bytes: [ByteBuffer] = []
        var trustRequest: PeerTrustRequest?
        var admission: Hello?
        for (index, action) in actions.enumerated() {
            switch action {
            case .send(let buffer):
                bytes.append(buffer)
            case .evaluateTrust(let request):
                precondition(!trustRequested, "\(name): trust asked twice")
                precondition(!established, "\(name): trust asked after .established")
                trustRequested = true
                trustRequest = request
            case .established:
                precondition(!established, "\(name): .established twice")
                precondition(locallyAccepted, "\(name): .established before the application accepted")
                established = true
            case .deliver(let frame):
                precondition(established, "\(name): .deliver before .established")
                precondition(!Self.neverDelivered.contains(frame.type), "\(name): delivered a \(frame.type) frame")
                delivered.append(frame)
            case .close(let error):
                precondition(index == actions.count - 1, "\(name): actions after .close in the same list")
                closed = true
                closeError = error
            case .admissionRequested(let hello):
                precondition(!established && !trustRequested, "\(name): admission asked after the trust step began")
                precondition(admission == nil && !admissionAsked, "\(name): admission asked twice")
                precondition(index == actions.count - 1, "\(name): actions after .admissionRequested in the same list")
                admissionAsked = true
                admission = hello
            case .invitationReceived, .awaitingInvitationAnswer, .invitationAnswered:
                // Only on invitation connections, which never become established.
                precondition(!established, "\(name): an invitation action on an established connection")
            }
        }
        return (bytes, trustRequest, admission)
    }

    /// The machine answers these itself or treats them as violations once connected.
    static let neverDelivered: Set<FrameType> = [.hello, .trust, .invitation, .invitationResponse, .ping, .goodbye]

    func checkAgrees(with machine: ConnectionStateMachine) {
        precondition(machine.isClosed == closed, "\(name): isClosed \(machine.isClosed), but .close seen: \(closed)")
        precondition(
            machine.isConnected == (established && !closed),
            "\(name): isConnected \(machine.isConnected), established \(established), closed \(closed)")
    }
}

struct ConnectionHarness {
    var machine: ConnectionStateMachine
    var counterpart: ConnectionStateMachine
    var mine: MachineObserver
    var theirs: MachineObserver
    /// Bytes the counterpart sent that the machine has not received yet.
    var pending = ByteBuffer()
    let counterpartAccepts: Bool
    let builder: FrameBuilder
    let counterpartBuilder: FrameBuilder
    /// Frames each side's application sent, for the in-order delivery check.
    var sentByMachine: [Frame] = []
    var sentByCounterpart: [Frame] = []
    var run = ConnectionRun()
    /// The listener's session, as the session core answers: no invitations until they arrive with discovery.
    let admission: (Hello) -> ConnectionConfiguration.Admission

    init(setup: UInt8, reason: UInt8) {
        let machineIsListener = setup & 1 != 0
        counterpartAccepts = setup & 2 == 0
        let counterpartPurpose: Hello.Purpose = [.connectionData, .meshIntroduction, .invitation, .answer][Int(setup >> 2 & 3)]
        let admission: ConnectionConfiguration.Admission = switch setup >> 4 & 3 {
        case 0, 1: .admit
        case 2: .refuse(.sessionFull)
        default: .refuse(GoodbyeReason(rawValue: UInt16(reason)))
        }
        // Plaintext but for the last choice, where both prefer TLS and the pair runs it.
        let preferences: (mine: WireEncryptionPreference, theirs: WireEncryptionPreference) = switch setup >> 6 {
        case 0, 1: (.none, .none)
        case 2: (.optional, .none)
        default: (.optional, .optional)
        }

        let dialerPeer = SessionFuzzChecks.dialerPeer
        let listenerPeer = SessionFuzzChecks.listenerPeer
        let dialerPurpose: Hello.Purpose = machineIsListener ? counterpartPurpose : .connectionData
        let dialer = ConnectionConfiguration(
            role: .dialer, localPeer: dialerPeer,
            encryptionPreference: machineIsListener ? preferences.theirs : preferences.mine, tls: SessionFuzzChecks.tls,
            purpose: dialerPurpose, token: [.connectionData, .meshIntroduction].contains(dialerPurpose) ? Bytes16(high: 1, low: 2) : .zero,
            datagramPort: 40_001, datagramReceiverID: 7)
        let listener = ConnectionConfiguration(
            role: .listener, localPeer: listenerPeer,
            encryptionPreference: machineIsListener ? preferences.mine : preferences.theirs, tls: SessionFuzzChecks.tls,
            listenPort: 40_000)
        self.admission = { hello in hello.purpose == .invitation ? .refuse(.protocolError) : admission }
        machine = try! ConnectionStateMachine(configuration: machineIsListener ? listener : dialer)
        counterpart = try! ConnectionStateMachine(configuration: machineIsListener ? dialer : listener)
        mine = MachineObserver(name: machineIsListener ? "listener" : "dialer")
        theirs = MachineObserver(name: machineIsListener ? "counterpart dialer" : "counterpart listener")

        // The preambles both machines send: this release's version range.
        let echo = Hello.echo(
            dialer: try! Preamble(maxVersion: dialer.maxProtocolVersion, encryptionPreference: dialer.encryptionPreference, hasIdentity: false),
            listener: try! Preamble(maxVersion: listener.maxProtocolVersion, encryptionPreference: listener.encryptionPreference, hasIdentity: false))
        let (local, remote) = machineIsListener ? (listenerPeer, dialerPeer) : (dialerPeer, listenerPeer)
        builder = FrameBuilder(echo: echo, localPeer: local, remotePeer: remote)
        counterpartBuilder = FrameBuilder(echo: echo, localPeer: remote, remotePeer: local)

        // The counterpart first, so our preamble finds it listening and its HELLO is queued.
        applyCounterpart(counterpart.start())
        apply(machine.start())
    }

    mutating func perform(_ op: ConnectionOp, _ input: inout FuzzInput) {
        switch op {
        case .deliverAll:
            // The shells flush what TLS held before their bytes move on.
            apply(machine.flushHeld())
            applyCounterpart(counterpart.flushHeld())
            deliver(pending.readableBytes)
        case .deliverSome:
            deliver(Int(input.byte()) + 1)
        case .raw:
            inject(ByteBuffer(bytes: input.bytes(upTo: 255)))
        case .frame:
            let split = Int(input.byte())
            var bytes = ByteBuffer()
            guard let frame = builder.frame(&input), (try? frame.encode(into: &bytes)) != nil else { return }
            run.untainted = false
            let first = bytes.readSlice(length: min(split, bytes.readableBytes))!
            apply(machine.receive(first))
            apply(machine.receive(bytes))
        case .trustDecided:
            let accepted = input.bool()
            if accepted && mine.trustRequested { mine.locallyAccepted = true }
            apply(machine.trustDecided(accepted: accepted))
        case .trustTimedOut:
            apply(machine.trustTimedOut())
        case .handshakeTimedOut:
            apply(machine.handshakeTimedOut())
        case .peerUnresponsive:
            apply(machine.peerUnresponsive())
        case .transportClosed:
            apply(machine.transportClosed())
        case .disconnect:
            apply(machine.disconnect(reason: GoodbyeReason(rawValue: UInt16(input.byte()))))
        case .send:
            guard let frame = builder.frame(&input) else { return }
            if let actions = Self.send(frame, on: &machine, observer: mine, coalescing: sentByMachine.count % 2 == 1) {
                sentByMachine.append(frame)
                apply(actions)
            }
        case .counterpartTrustDecided:
            let accepted = input.bool()
            if accepted && theirs.trustRequested { theirs.locallyAccepted = true }
            applyCounterpart(counterpart.trustDecided(accepted: accepted))
        case .counterpartSend:
            guard let frame = counterpartBuilder.frame(&input) else { return }
            if let actions = Self.send(frame, on: &counterpart, observer: theirs, coalescing: sentByCounterpart.count % 2 == 1) {
                sentByCounterpart.append(frame)
                applyCounterpart(actions)
            }
        case .counterpartEvent:
            switch input.byte() % 4 {
            case 0: applyCounterpart(counterpart.disconnect(reason: GoodbyeReason(rawValue: UInt16(input.byte()))))
            case 1: applyCounterpart(counterpart.handshakeTimedOut())
            case 2: applyCounterpart(counterpart.peerUnresponsive())
            default: applyCounterpart(counterpart.transportClosed())
            }
        case .tamper:
            let position = Int(input.integer(UInt16.self))
            let bit = input.byte() % 8
            guard pending.readableBytes > 0 else { return }
            run.untainted = false
            let index = pending.readerIndex + position % pending.readableBytes
            pending.setInteger(pending.getInteger(at: index, as: UInt8.self)! ^ 1 << bit, at: index)
        case .startAgain:
            precondition(machine.start().isEmpty, "a second start() did something")
        }
    }

    /// `send(_:)` must refuse exactly when the machine is not connected. The actions, if it sent.
    static func send(
        _ frame: Frame, on machine: inout ConnectionStateMachine, observer: MachineObserver, coalescing: Bool
    ) -> [ConnectionAction]? {
        let connected = observer.established && !observer.closed
        do {
            let actions = try machine.send(frame, coalescing: coalescing)
            precondition(connected, "\(observer.name): send(_:) accepted a frame while not connected")
            return actions
        } catch .notConnected {
            precondition(!connected, "\(observer.name): send(_:) said not connected while connected")
        } catch {
            precondition(connected, "\(observer.name): send(_:) refused with \(error) while not connected")
        }
        return nil
    }

    mutating func deliver(_ count: Int) {
        guard let bytes = pending.readSlice(length: min(count, pending.readableBytes)), bytes.readableBytes > 0 else { return }
        apply(machine.receive(bytes))
    }

    mutating func inject(_ bytes: ByteBuffer) {
        run.untainted = false
        apply(machine.receive(bytes))
    }

    /// The machine's actions: checked, and its bytes straight to the counterpart.
    mutating func apply(_ actions: [ConnectionAction]) {
        let (bytes, _, hello) = mine.observe(actions)
        mine.checkAgrees(with: machine)
        for buffer in bytes { applyCounterpart(counterpart.receive(buffer)) }
        if let hello { apply(machine.admitted(admission(hello))) }
    }

    /// The counterpart's actions: checked, its bytes queued for delivery, trust answered if it
    /// answers on its own.
    mutating func applyCounterpart(_ actions: [ConnectionAction]) {
        let (bytes, trustRequest, hello) = theirs.observe(actions)
        theirs.checkAgrees(with: counterpart)
        for var buffer in bytes { pending.writeBuffer(&buffer) }
        if let hello { applyCounterpart(counterpart.admitted(admission(hello))) }
        if trustRequest != nil && counterpartAccepts {
            theirs.locallyAccepted = true
            applyCounterpart(counterpart.trustDecided(accepted: true))
        }
    }

    mutating func finish() {
        apply(machine.flushHeld())
        applyCounterpart(counterpart.flushHeld())
        // The counterpart only ever receives what the machine sent, so this holds whatever was injected.
        precondition(
            Self.isDelivery(theirs.delivered, of: sentByMachine, complete: false),
            "the counterpart delivered frames the machine did not send, or out of order: \(mine.name) sent \(Self.describe(sentByMachine)), counterpart delivered \(Self.describe(theirs.delivered)) and sent \(Self.describe(sentByCounterpart))")
        if run.untainted {
            // Let the handshake finish (TLS needs several round trips).
            var rounds = 0
            while pending.readableBytes > 0 && !mine.closed && rounds < 16 {
                rounds += 1
                deliver(pending.readableBytes)
            }
            precondition(Self.isDelivery(mine.delivered, of: sentByCounterpart, complete: false), "frames from an honest peer lost, changed or reordered")
            // Once connected, what `send(_:)` let out must be legal to the peer: it refuses what the
            // peer would close on. (Before, the fuzzed setup may pair purposes that do not fit.)
            for side in [mine, theirs] where side.established {
                if let error = side.closeError, [.protocolViolation, .flowControlViolation].contains(error.code) {
                    preconditionFailure("\(side.name) closed on frames its honest peer's send(_:) let out: \(error); machine sent \(Self.describe(sentByMachine)), counterpart sent \(Self.describe(sentByCounterpart))")
                }
            }
            if !mine.closed && !theirs.closed {
                precondition(mine.trustRequested && theirs.trustRequested, "an honest handshake stalled before trust")
                if mine.locallyAccepted && theirs.locallyAccepted {
                    precondition(mine.established && theirs.established, "both accepted, yet not both established")
                    precondition(Self.isDelivery(mine.delivered, of: sentByCounterpart, complete: true), "frames from an honest peer not all delivered")
                }
            }
        }
        run.trustRequested = mine.trustRequested
        run.established = mine.established
        run.closed = mine.closed
        run.delivered = mine.delivered.count
    }

    static func describe(_ frames: [Frame]) -> String {
        "[" + frames.map { "\($0.type)(\($0.channel))" }.joined(separator: ", ") + "]"
    }

    static func isDeliverable(_ frame: Frame) -> Bool { !MachineObserver.neverDelivered.contains(frame.type) }

    /// Frames a machine also sends on its own: PONGs answer PINGs, and WINDOW_UPDATEs on channel
    /// 0 give back window for data it dropped (docs/PROTOCOL.md §7.6). The application may send
    /// both too, so neither side's are compared.
    static func withoutAutomatic(_ frames: [Frame]) -> [Frame] {
        frames.filter {
            switch $0 {
            case .pong, .windowUpdate(0, _): false
            default: true
            }
        }
    }

    /// A receiver drops frames for a channel it has ended (docs/PROTOCOL.md §7.6: they crossed its
    /// own end); every other frame must arrive.
    static func mayBeDropped(_ frame: Frame) -> Bool { frame.channel != 0 }

    /// Deliveries must be what was sent, in order, once both drop what is never delivered, with
    /// only channel frames missing; `complete`: nothing else is still to come.
    static func isDelivery(_ delivered: [Frame], of sent: [Frame], complete: Bool) -> Bool {
        let sent = withoutAutomatic(sent).filter(isDeliverable)
        var next = sent.startIndex
        for frame in withoutAutomatic(delivered) {
            while next < sent.endIndex && sent[next] != frame {
                guard mayBeDropped(sent[next]) else { return false }
                next += 1
            }
            guard next < sent.endIndex else { return false }
            next += 1
        }
        return !complete || sent[next...].allSatisfy(mayBeDropped)
    }
}
