import MultipeerWire
import NIOCore

/// One dial's TCP connects, on the engine's loop, staggered as RFC 8305 does: each endpoint's
/// connect starts when the one before it failed or, with an attempt delay, once that long has
/// passed since it began, without waiting out a dead address's connect deadline. The first
/// connection that lands carries the dial, and every other connect closes, as do all of them when
/// the dial is let go (a dial replaced by news holds no socket to a dead address).
final class StaggeredDial {
    /// Starts a TCP connect to `endpoint`. `opened` gets the socket before it has connected, so
    /// that a dial let go can close it; nil when the endpoint has no socket address here.
    typealias Connect = (_ endpoint: WireEndpoint, _ opened: @escaping (any Channel) -> Void) -> EventLoopFuture<any Channel>?

    /// What the dial's owner makes of a connection that landed.
    enum Landing {
        /// It carries the dial: no more connects.
        case carries
        /// It cannot (its handlers could not go in): the next endpoint is tried.
        case tryNext
        /// The dial is no longer wanted: its connects close.
        case letGo
    }

    private let endpoints: [WireEndpoint]
    private let attemptDelay: TimeAmount?
    private let eventLoop: any EventLoop
    private let connect: Connect
    private let landed: (any Channel, WireEndpoint) -> Landing
    private let exhausted: () -> Void
    private let failed: (WireEndpoint, any Error) -> Void

    private var next = 0
    /// Connects started and not yet landed; a socket that failed before it opened is counted
    /// here and not in `connecting`.
    private var inFlight = 0
    /// Sockets of connects under way, by attempt number: what `abandon` closes.
    private var connecting: [Int: any Channel] = [:]
    private var nextAttempt: Scheduled<Void>?
    /// Carried, exhausted or abandoned: nothing starts or carries any more.
    private(set) var isFinished = false

    /// - Parameters:
    ///   - landed: a connection landed; says what becomes of it.
    ///   - exhausted: every endpoint's connect failed (called once, after the last has landed).
    ///   - failed: one connect failed (for the log).
    init(
        endpoints: [WireEndpoint], attemptDelay: TimeAmount?, eventLoop: any EventLoop, connect: @escaping Connect,
        landed: @escaping (any Channel, WireEndpoint) -> Landing, exhausted: @escaping () -> Void,
        failed: @escaping (WireEndpoint, any Error) -> Void
    ) {
        self.endpoints = endpoints
        self.attemptDelay = attemptDelay
        self.eventLoop = eventLoop
        self.connect = connect
        self.landed = landed
        self.exhausted = exhausted
        self.failed = failed
    }

    func start() { startNext() }

    /// Starts no more connects and closes those under way (their connects then land here and
    /// are closed too).
    func abandon() {
        guard !isFinished else { return }
        finish()
    }

    private func startNext() {
        guard !isFinished else { return }
        nextAttempt?.cancel()
        nextAttempt = nil
        let this = NIOLoopBound(self, eventLoop: eventLoop)
        while next < endpoints.count {
            let attempt = next
            let endpoint = endpoints[attempt]
            next += 1
            guard let connection = connect(endpoint, { socket in this.value.opened(socket, attempt: attempt) }) else { continue }
            inFlight += 1
            if let attemptDelay, next < endpoints.count {
                nextAttempt = eventLoop.scheduleTask(in: attemptDelay) { this.value.startNext() }
            }
            connection.whenComplete { result in this.value.land(result, attempt: attempt, endpoint: endpoint) }
            return
        }
        if inFlight == 0 {
            finish()
            exhausted()
        }
    }

    private func opened(_ socket: any Channel, attempt: Int) {
        if isFinished {
            socket.close(promise: nil)
        } else {
            connecting[attempt] = socket
        }
    }

    private func land(_ result: Result<any Channel, any Error>, attempt: Int, endpoint: WireEndpoint) {
        inFlight -= 1
        connecting[attempt] = nil
        switch result {
        case .success(let socket):
            guard !isFinished else { return socket.close(promise: nil) }
            switch landed(socket, endpoint) {
            case .carries:
                finish()
            case .tryNext:
                socket.close(promise: nil)
                startNext()
            case .letGo:
                socket.close(promise: nil)
                finish()
            }
        case .failure(let error):
            guard !isFinished else { return }
            failed(endpoint, error)
            startNext()
        }
    }

    private func finish() {
        isFinished = true
        nextAttempt?.cancel()
        nextAttempt = nil
        next = endpoints.count
        let sockets = connecting.values
        connecting = [:]
        // After the state is settled: a close completes a connect, which lands here.
        for socket in sockets { socket.close(promise: nil) }
    }
}
