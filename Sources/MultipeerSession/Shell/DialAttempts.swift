import MultipeerWire
import NIOCore

/// One dial's connection attempts, on the engine's loop: which endpoint comes next, the connects
/// still under way, and whether one of them carries the link already.
struct DialAttempts {
    private let endpoints: [WireEndpoint]
    private var next = 0
    /// Connects under way, by attempt number: closed when another wins or the dial is let go,
    /// so a dial replaced by news holds no socket to a dead address until its deadline.
    private var connecting: [Int: any Channel] = [:]
    private(set) var inFlight = 0
    var connected = false
    /// The next endpoint's start, when the plan does not wait for a connect to fail.
    var nextAttempt: Scheduled<Void>?

    init(_ endpoints: [WireEndpoint]) { self.endpoints = endpoints }

    var hasNext: Bool { next < endpoints.count }

    /// The next endpoint and its attempt number.
    mutating func takeNext() -> (endpoint: WireEndpoint, attempt: Int)? {
        guard hasNext else { return nil }
        defer { next += 1 }
        return (endpoints[next], next)
    }

    mutating func started() { inFlight += 1 }

    mutating func opened(_ channel: any Channel, attempt: Int) { connecting[attempt] = channel }

    mutating func landed(_ attempt: Int) {
        inFlight -= 1
        connecting[attempt] = nil
    }

    /// Starts no more connects; returns those under way, for the caller to close once this is
    /// no longer being changed (a close completes their connects, which land here).
    mutating func abandon() -> [any Channel] {
        nextAttempt?.cancel()
        nextAttempt = nil
        next = endpoints.count
        defer { connecting = [:] }
        return Array(connecting.values)
    }
}

extension NIOLoopBoundBox where Value == DialAttempts {
    /// Closes the dial's connects still under way, and starts no more.
    func abandon() {
        for channel in value.abandon() { channel.close(promise: nil) }
    }
}
