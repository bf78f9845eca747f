import MultipeerCrypto
import MultipeerWire
import NIOConcurrencyHelpers
import NIOCore
import MultipeerProtocol

/// What a connection tells the handlers after it.
package enum ConnectionEvent {
    case established(EstablishedConnection)
    case frame(Frame)
    /// The connection ended (after `established` or instead of it); the channel closes next.
    case closed(ConnectionError)
    /// Invitation connection, listener: the invitation; answer with `ConnectionCommand.answerInvitation`.
    case invitationReceived(InvitationRequest)
    /// Invitation connection, dialer: the advertiser's answer (docs/PROTOCOL.md §7.2).
    case invitationAnswered(InvitationAnswer)
}

/// Commands for a connection, sent as user outbound events.
package enum ConnectionCommand: Sendable {
    /// Say GOODBYE with this reason and close.
    case close(GoodbyeReason)
    /// End the connection for this error: GOODBYE with its reason, and the error reported.
    case abort(ConnectionError)
    /// Stop reading from the peer (the application holds too much of its data undelivered).
    case pauseReading
    /// Read again after `pauseReading`.
    case resumeReading
    /// Invitation connection, listener: send the application's answer and close.
    case answerInvitation(InvitationAnswer)
    /// Close without GOODBYE: the link is lost (our address went), and the session recovers.
    case sever
}

/// The SwiftNIO shell around `ConnectionStateMachine`: moves bytes, runs the trust and handshake
/// timers, and asks the application for its trust decision. It holds no protocol logic.
package final class ConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ConnectionEvent
    package typealias OutboundIn = Frame
    package typealias OutboundOut = ByteBuffer

    /// Called with the peer to judge and a completion to call once, from any thread.
    /// When no evaluator is given, every peer is accepted (Apple's behaviour without a certificate handler).
    package typealias TrustEvaluator = @Sendable (PeerTrustRequest, @escaping @Sendable (Bool) -> Void) -> Void
    /// A listener asks it, on the loop, whether the dialer's HELLO may join; with the SHA-256 of
    /// the leaf certificate the dialer showed (nil without one).
    package typealias Admission = (Hello, [UInt8]?) -> ConnectionConfiguration.Admission

    // Exclusivity is unchecked on the state each frame touches: a handler lives on its channel's
    // event loop, what NIO hands it re-entrantly waits (`deferredInbound`), and the checks cost
    // time on every frame.
    // Admission calls into the session engine between two of the machine's steps (never inside
    // one); debug builds, the tests', keep checking the machine, so an action that came back to
    // this handler from there would trap rather than overlap.
    #if DEBUG
    private var machine: ConnectionStateMachine
    #else
    @exclusivity(unchecked) private var machine: ConnectionStateMachine
    #endif
    private let trustEvaluator: TrustEvaluator?
    private let admission: Admission
    private let trustTimeout: TimeAmount
    private let handshakeTimeout: TimeAmount
    private var handshakeTimer: Scheduled<Void>?
    private var trustTimer: Scheduled<Void>?
    /// Completes the pending trust promise, so none is left unfulfilled when the connection ends early.
    private var pendingTrustAnswer: (@Sendable (Bool) -> Void)?
    private var started = false
    private let keepalive: KeepalivePolicy?
    private var keepaliveTask: RepeatedTask?
    @exclusivity(unchecked) private var lastReceived = NIODeadline.uptimeNanoseconds(0)
    @exclusivity(unchecked) private var keepaliveClock: KeepaliveClock?
    /// Answers (PONGs, refusals of channels, returned window) queued while the channel could not
    /// take them; past the limit we stop reading from a peer that asks faster than it reads, so
    /// its requests cannot grow our memory.
    @exclusivity(unchecked) private var replyBacklog = 0
    @exclusivity(unchecked) private var readsHeldForReplies = false
    @exclusivity(unchecked) private var readsHeldForReceiver = false
    @exclusivity(unchecked) private var readPending = false
    /// Frames written since the last flush. The first is sealed at once; TLS holds the rest to
    /// share records, so a burst of small frames costs a record or two rather than one each.
    @exclusivity(unchecked) private var writesSinceFlush = 0
    private var readsHeld: Bool { readsHeldForReplies || readsHeldForReceiver }
    /// How deep in `perform` we are. NIO reads what the socket still holds from inside a write
    /// that failed, then closes the channel (`BaseSocketChannel.flushNow`); the engine writes
    /// while it handles a frame we deliver, so those reads and that close can come in the middle
    /// of a delivery. They wait in `deferredInbound` until it is over, or the session would meet
    /// the later frames first (and count them: the peer's RESUME would skip the earlier ones).
    /// Bounded by what the socket held when the write failed.
    @exclusivity(unchecked) private var performDepth = 0
    @exclusivity(unchecked) private var drainingDeferred = false
    @exclusivity(unchecked) private var deferredInbound = CircularBuffer<DeferredInbound>()
    private enum DeferredInbound {
        case read(ByteBuffer)
        case inactive
    }
    /// The handler's own context while it is in a pipeline, so the engine can hand it frames
    /// directly: through the pipeline each frame is boxed in an `NIOAny` and cast back.
    @exclusivity(unchecked) private var ownContext: ChannelHandlerContext?
    static let replyBacklogLimit = 64 * 1024

    package init(
        configuration: ConnectionConfiguration,
        trustEvaluator: TrustEvaluator? = nil,
        admission: @escaping Admission = { _, _ in .admit },
        trustTimeout: TimeAmount = .seconds(30),
        handshakeTimeout: TimeAmount = .seconds(Int64(WireLimits.defaultHandshakeDeadlineSeconds)),
        keepalive: KeepalivePolicy? = KeepalivePolicy()
    ) throws(WireError) {
        machine = try ConnectionStateMachine(configuration: configuration)
        self.keepalive = keepalive
        self.trustEvaluator = trustEvaluator
        self.admission = admission
        self.trustTimeout = trustTimeout
        self.handshakeTimeout = handshakeTimeout
    }

    /// How far establishment got (see `ConnectionStateMachine.establishmentProgress`).
    package var establishmentProgress: Int { machine.establishmentProgress }

    /// When the peer last sent anything.
    package var lastActivity: NIODeadline { lastReceived }

    /// The TLS engine, once TLS was negotiated (exporter keys, key-update counters).
    package var tlsEngine: TLSEngine? { machine.tlsEngine }

    package func handlerAdded(context: ChannelHandlerContext) {
        ownContext = context
        if context.channel.isActive { start(context: context) }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        ownContext = nil  // the context refers back to the handler
    }

    package func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard performDepth == 0 else {
            deferredInbound.append(.read(unwrapInboundIn(data)))
            return
        }
        read(unwrapInboundIn(data), context: context)
    }

    private func read(_ bytes: ByteBuffer, context: ChannelHandlerContext) {
        lastReceived = context.eventLoop.now
        keepaliveClock?.received(at: lastReceived)
        let repliedBefore = machine.replyByteCount
        perform(machine.receive(bytes), context: context)
        if !context.channel.isWritable {
            replyBacklog += machine.replyByteCount - repliedBefore
            if replyBacklog > Self.replyBacklogLimit { readsHeldForReplies = true }
        }
    }

    package func read(context: ChannelHandlerContext) {
        if readsHeld {
            readPending = true
        } else {
            context.read()
        }
    }

    package func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            replyBacklog = 0
            readsHeldForReplies = false
            readIfReleased(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    private func readIfReleased(context: ChannelHandlerContext) {
        if !readsHeld && readPending {
            readPending = false
            context.read()
        }
    }

    package func channelInactive(context: ChannelHandlerContext) {
        guard performDepth == 0 else {
            deferredInbound.append(.inactive)
            return
        }
        inactive(context: context)
    }

    private func inactive(context: ChannelHandlerContext) {
        perform(machine.transportClosed(), context: context)
        cancelTimers()
        stopKeepalive()
        context.fireChannelInactive()
    }

    /// The promise completes when the frame's bytes are handed to the channel (or fail); at once
    /// for a frame TLS holds to share a record, whose bytes follow at the flush.
    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        write(unwrapOutboundIn(data), context: context, promise: promise)
    }

    /// `channel.write(frame)` without the pipeline, on the channel's loop; false once the handler
    /// has left its pipeline, when the caller writes through the channel instead. No handler after
    /// this one writes, so the frame takes the same path.
    package func write(_ frame: Frame) -> Bool {
        guard let context = ownContext else { return false }
        assert(context.eventLoop.inEventLoop, "a frame written to a handler off its event loop")
        write(frame, context: context, promise: nil)
        return true
    }

    /// `channel.flush()` without the pipeline, like `write(_:)`.
    package func flush() -> Bool {
        guard let context = ownContext else { return false }
        assert(context.eventLoop.inEventLoop, "a handler flushed off its event loop")
        flush(context: context)
        return true
    }

    private func write(_ frame: Frame, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        do {
            var pending: ByteBuffer?
            let coalescing = writesSinceFlush > 0
            writesSinceFlush += 1
            for case .send(let bytes) in try machine.send(frame, coalescing: coalescing) {
                if let earlier = pending { context.write(wrapOutboundOut(earlier), promise: nil) }
                pending = bytes
            }
            if let last = pending {
                context.write(wrapOutboundOut(last), promise: promise)
            } else {
                promise?.succeed()  // nothing to write yet: TLS holds it until the flush
            }
        } catch {
            promise?.fail(error)
        }
    }

    /// Frames held to share TLS records are sealed and written here.
    package func flush(context: ChannelHandlerContext) {
        let holdsFrames = writesSinceFlush > 1
        writesSinceFlush = 0
        if holdsFrames {
            let held = machine.flushHeld()
            if !held.isEmpty { return perform(held, context: context) }  // it flushes what it writes
        }
        context.flush()
    }

    package func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let command = event as? ConnectionCommand else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        switch command {
        case .close(let reason):
            perform(machine.disconnect(reason: reason), context: context)
        case .abort(let error):
            perform(machine.abort(error), context: context)
        case .pauseReading:
            readsHeldForReceiver = true
        case .resumeReading:
            readsHeldForReceiver = false
            readIfReleased(context: context)
        case .answerInvitation(let answer):
            handshakeTimer?.cancel()
            perform(machine.answerInvitation(answer), context: context)
        case .sever:
            // Not through this handler's `close`, which says GOODBYE.
            context.close(promise: nil)
        }
        promise?.succeed()
    }

    /// A close from the application says GOODBYE first.
    package func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if !machine.isClosed {
            perform(machine.disconnect(), context: context, closing: false)
        }
        cancelTimers()
        stopKeepalive()
        context.close(mode: mode, promise: promise)
    }

    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        lastReceived = context.eventLoop.now
        armDeadline(after: handshakeTimeout, context: context)
        perform(machine.start(), context: context)
    }

    /// (Re)starts the one deadline that bounds the handshake: before the trust step, and again
    /// while we wait for the peer's own trust answer once ours is given.
    private func armDeadline(after timeout: TimeAmount, context: ChannelHandlerContext) {
        handshakeTimer?.cancel()
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.perform(handler.machine.handshakeTimedOut(), context: context)
        }
    }

    /// Replaces the handshake deadline with the invitation's (docs/PROTOCOL.md §7.2).
    private func armInvitationDeadline(after timeout: TimeAmount, context: ChannelHandlerContext) {
        handshakeTimer?.cancel()
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.perform(handler.machine.invitationTimedOut(), context: context)
        }
    }

    private func answerTrust(_ accepted: Bool, context: ChannelHandlerContext) {
        trustTimer?.cancel()
        perform(machine.trustDecided(accepted: accepted), context: context)
        // The peer's app has its own trust timeout; allow that plus the handshake budget, so its
        // TRUST timedOut normally arrives before we give up ourselves.
        if !machine.isConnected && !machine.isClosed {
            // Saturating: TimeAmount's + traps, and both timeouts are the app's to choose.
            let (sum, overflowed) = trustTimeout.nanoseconds.addingReportingOverflow(handshakeTimeout.nanoseconds)
            armDeadline(after: .nanoseconds(overflowed ? .max : sum), context: context)
        }
    }

    private func perform(_ actions: [ConnectionAction], context: ChannelHandlerContext, closing: Bool = true) {
        performDepth += 1
        performNow(actions, context: context, closing: closing)
        performDepth -= 1
        guard performDepth == 0, !drainingDeferred, !deferredInbound.isEmpty else { return }
        // Each waiting event is handled as if it came now, in the order it came, from here
        // only: what they defer in turn joins the queue rather than a deeper stack.
        drainingDeferred = true
        while let next = deferredInbound.popFirst() {
            switch next {
            case .read(let bytes): read(bytes, context: context)
            case .inactive: inactive(context: context)
            }
        }
        drainingDeferred = false
    }

    private func performNow(_ actions: [ConnectionAction], context: ChannelHandlerContext, closing: Bool) {
        var wrote = false
        // Bytes first: every record here was sealed before any event below is fired, and what
        // an event's handler writes at once is sealed after them, so it must follow them out
        // (TLS numbers records; a peer cannot open them out of order). A close comes last.
        for case .send(let bytes) in actions {
            context.write(wrapOutboundOut(bytes), promise: nil)
            wrote = true
        }
        for action in actions {
            switch action {
            case .send:
                continue  // written above
            case .evaluateTrust(let request):
                askTrust(request, context: context)
            case .established(let connection):
                cancelTimers()
                startKeepalive(context: context)
                context.fireChannelRead(wrapInboundOut(.established(connection)))
            case .deliver(let frame):
                context.fireChannelRead(wrapInboundOut(.frame(frame)))
            case .invitationReceived(let request):
                // The application's time is the invitation's own, not the handshake's.
                armInvitationDeadline(after: request.answerWait, context: context)
                context.fireChannelRead(wrapInboundOut(.invitationReceived(request)))
            case .awaitingInvitationAnswer(let milliseconds):
                let wait = InvitationTiming.inviterWait(timeoutMilliseconds: milliseconds, handshakeTimeout: handshakeTimeout)
                armInvitationDeadline(after: wait, context: context)
            case .admissionRequested(let hello):
                perform(machine.admitted(admission(hello, machine.admittingPeerCertificateFingerprint)), context: context, closing: closing)
            case .invitationAnswered(let answer):
                handshakeTimer?.cancel()
                context.fireChannelRead(wrapInboundOut(.invitationAnswered(answer)))
            case .close(let error):
                cancelTimers()
                stopKeepalive()
                if wrote { context.flush() }
                wrote = false
                context.fireChannelRead(wrapInboundOut(.closed(error)))
                if closing { context.close(promise: nil) }
            }
        }
        if wrote { context.flush() }
    }

    private func askTrust(_ request: PeerTrustRequest, context: ChannelHandlerContext) {
        // The application's time is bounded by its own timer, not by the handshake deadline.
        handshakeTimer?.cancel()
        guard let trustEvaluator else {
            answerTrust(true, context: context)
            return
        }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        trustTimer = context.eventLoop.assumeIsolated().scheduleTask(in: trustTimeout) {
            let (handler, context) = loopBound.value
            handler.perform(handler.machine.trustTimedOut(), context: context)
        }
        let promise = context.eventLoop.makePromise(of: Bool.self)
        promise.futureResult.assumeIsolated().whenSuccess { accepted in
            let (handler, context) = loopBound.value
            handler.answerTrust(accepted, context: context)
        }
        let answered = NIOLockedValueBox(false)
        let answer: @Sendable (Bool) -> Void = { accepted in
            // The application may call twice; only the first answer counts.
            let first = answered.withLockedValue { wasAnswered in
                defer { wasAnswered = true }
                return !wasAnswered
            }
            if first { promise.succeed(accepted) }
        }
        pendingTrustAnswer = answer
        trustEvaluator(request, answer)
    }

    private func startKeepalive(context: ChannelHandlerContext) {
        guard let keepalive else { return }
        keepaliveClock = KeepaliveClock(policy: keepalive, now: context.eventLoop.now)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        keepaliveTask = context.eventLoop.scheduleRepeatedTask(
            initialDelay: keepalive.tick, delay: keepalive.tick
        ) { _ in
            let (handler, context) = loopBound.value
            handler.keepaliveTick(context: context)
        }
    }

    private func keepaliveTick(context: ChannelHandlerContext) {
        let now = context.eventLoop.now
        switch keepaliveClock?.tick(now: now, readsHeld: readsHeldForReceiver) {
        case .peerDead: perform(machine.peerUnresponsive(), context: context)
        case .ping: perform((try? machine.send(.ping(UInt64(now.uptimeNanoseconds)))) ?? [], context: context)
        case .nothing, nil: break
        }
    }

    private func cancelTimers() {
        // A late or missing answer is moot once the connection is past the trust step.
        pendingTrustAnswer?(false)
        pendingTrustAnswer = nil
        handshakeTimer?.cancel()
        handshakeTimer = nil
        trustTimer?.cancel()
        trustTimer = nil
    }

    private func stopKeepalive() {
        keepaliveTask?.cancel()
        keepaliveTask = nil
    }
}
