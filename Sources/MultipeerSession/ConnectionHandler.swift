import MultipeerCrypto
import MultipeerWire
import NIOConcurrencyHelpers
import NIOCore

/// What a connection tells the handlers after it.
public enum ConnectionEvent {
    case established(EstablishedConnection)
    case frame(Frame)
    /// The connection ended (after `established` or instead of it); the channel closes next.
    case closed(ConnectionError)
}

/// The SwiftNIO shell around `ConnectionStateMachine`: moves bytes, runs the trust and handshake
/// timers, and asks the application for its trust decision. It holds no protocol logic.
public final class ConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ConnectionEvent
    public typealias OutboundIn = Frame
    public typealias OutboundOut = ByteBuffer

    /// Called with the peer to judge and a completion to call once, from any thread.
    /// When no evaluator is given, every peer is accepted (Apple's behaviour without a certificate handler).
    public typealias TrustEvaluator = @Sendable (PeerTrustRequest, @escaping @Sendable (Bool) -> Void) -> Void

    private var machine: ConnectionStateMachine
    private let trustEvaluator: TrustEvaluator?
    private let trustTimeout: TimeAmount
    private let handshakeTimeout: TimeAmount
    private var handshakeTimer: Scheduled<Void>?
    private var trustTimer: Scheduled<Void>?
    /// Completes the pending trust promise, so none is left unfulfilled when the connection ends early.
    private var pendingTrustAnswer: (@Sendable (Bool) -> Void)?
    private var started = false

    public init(
        configuration: ConnectionConfiguration,
        trustEvaluator: TrustEvaluator? = nil,
        trustTimeout: TimeAmount = .seconds(30),
        handshakeTimeout: TimeAmount = .seconds(Int64(WireLimits.defaultHandshakeDeadlineSeconds))
    ) throws(WireError) {
        machine = try ConnectionStateMachine(configuration: configuration)
        self.trustEvaluator = trustEvaluator
        self.trustTimeout = trustTimeout
        self.handshakeTimeout = handshakeTimeout
    }

    /// The TLS engine, once TLS was negotiated (exporter keys, key-update counters).
    public var tlsEngine: TLSEngine? { machine.tlsEngine }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        perform(machine.receive(unwrapInboundIn(data)), context: context)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        perform(machine.transportClosed(), context: context)
        cancelTimers()
        context.fireChannelInactive()
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        do {
            let actions = try machine.send(unwrapOutboundIn(data))
            for case .send(let bytes) in actions {
                context.write(wrapOutboundOut(bytes), promise: nil)
            }
            promise?.succeed()
        } catch {
            promise?.fail(error)
        }
    }

    /// A close from the application says GOODBYE first.
    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if !machine.isClosed {
            perform(machine.disconnect(), context: context, closing: false)
        }
        cancelTimers()
        context.close(mode: mode, promise: promise)
    }

    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
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

    private func answerTrust(_ accepted: Bool, context: ChannelHandlerContext) {
        trustTimer?.cancel()
        perform(machine.trustDecided(accepted: accepted), context: context)
        // The peer's app has its own trust timeout; allow that plus the handshake budget, so its
        // TRUST timedOut normally arrives before we give up ourselves.
        if !machine.isConnected && !machine.isClosed {
            armDeadline(after: trustTimeout + handshakeTimeout, context: context)
        }
    }

    private func perform(_ actions: [ConnectionAction], context: ChannelHandlerContext, closing: Bool = true) {
        var wrote = false
        for action in actions {
            switch action {
            case .send(let bytes):
                context.write(wrapOutboundOut(bytes), promise: nil)
                wrote = true
            case .evaluateTrust(let request):
                askTrust(request, context: context)
            case .established(let connection):
                cancelTimers()
                context.fireChannelRead(wrapInboundOut(.established(connection)))
            case .deliver(let frame):
                context.fireChannelRead(wrapInboundOut(.frame(frame)))
            case .close(let error):
                cancelTimers()
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

    private func cancelTimers() {
        // A late or missing answer is moot once the connection is past the trust step.
        pendingTrustAnswer?(false)
        pendingTrustAnswer = nil
        handshakeTimer?.cancel()
        handshakeTimer = nil
        trustTimer?.cancel()
        trustTimer = nil
    }
}
