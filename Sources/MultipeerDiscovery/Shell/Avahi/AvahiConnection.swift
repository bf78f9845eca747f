import CAvahiClient
import NIOCore

#if canImport(Glibc)
import Glibc
import MultipeerProtocol
#endif

/// One connection to avahi-daemon (C interop): Avahi's threaded poll, a thread of its own on
/// which every Avahi callback runs, and a client on it. Avahi objects are touched only on that
/// thread or under its lock (`locked`), and never from a NIO event loop: Avahi's calls are
/// blocking D-Bus round trips.
///
/// When the daemon goes away the owner hears `disconnected` (its Avahi objects are dead: it
/// frees them) and the connection waits for the daemon to come back (a new client that waits on
/// the bus, or a new attempt every 5 s while the bus itself is gone), then reports `running`.
final class AvahiConnection: @unchecked Sendable {
    enum State: Equatable {
        /// Publish and browse now.
        case running
        /// The daemon is (re)establishing its own host name: withdraw, and publish again at `running`.
        case registering
        /// The daemon or the bus went away.
        case disconnected(reason: String)
    }

    /// Confined to the poll thread or its lock, as everything below.
    private let poll: OpaquePointer
    private(set) var client: OpaquePointer?
    private var onState: ((State) -> Void)?
    private var timers: [ObjectIdentifier: AvahiTimer] = [:]
    private var closed = false
    static let reconnectInterval = TimeAmount.seconds(5)

    /// Connects to the daemon: blocking (D-Bus round trips), so call it off the event loops.
    /// Throws `systemUnavailable` when Avahi's client library cannot be loaded, or there is no
    /// bus or no daemon on it.
    init() throws(DiscoveryError) {
        guard cavahi_load() == 0 else {
            throw DiscoveryError(.systemUnavailable, cavahi_load_error().map { String(cString: $0) } ?? "Avahi's client library cannot be loaded")
        }
        guard let poll = cavahi_threaded_poll_new() else {
            throw DiscoveryError(.systemUnavailable, "cannot make Avahi's poll thread")
        }
        self.poll = poll
        var error: Int32 = 0
        // The first state callback runs inside avahi_client_new, before the owner is listening.
        guard let client = cavahi_client_new(cavahi_threaded_poll_get(poll), AvahiClientFlags(rawValue: 0), clientCallback, Unmanaged.passUnretained(self).toOpaque(), &error)
        else {
            cavahi_threaded_poll_free(poll)
            throw DiscoveryError(.systemUnavailable, "avahi-daemon on the D-Bus system bus: \(Self.describe(error))")
        }
        self.client = client
    }

    /// Starts the poll thread after telling `onState` the current state. `onState` runs on the
    /// poll thread, with the lock held.
    func start(onState: @escaping (State) -> Void) throws(DiscoveryError) {
        self.onState = onState
        if let client { onState(Self.state(of: client)) }
        guard cavahi_threaded_poll_start(poll) == 0 else {
            throw DiscoveryError(.systemUnavailable, "cannot start Avahi's poll thread")
        }
    }

    /// Runs `body` holding the poll lock. Blocking: call it off the event loops.
    func locked<Result>(_ body: () throws(DiscoveryError) -> Result) throws(DiscoveryError) -> Result {
        cavahi_threaded_poll_lock(poll)
        defer { cavahi_threaded_poll_unlock(poll) }
        return try body()
    }

    /// Runs `body` on the poll thread after `delay`; call with the lock held or on the poll thread.
    func schedule(after delay: TimeAmount, _ body: @escaping () -> Void) {
        guard !closed else { return }
        let timer = AvahiTimer(owner: self, body)
        timers[ObjectIdentifier(timer)] = timer
        var when = timeval()
        cavahi_elapse_time(&when, UInt32(clamping: max(0, delay.nanoseconds / 1_000_000)), 0)
        let api = cavahi_threaded_poll_get(poll)!
        timer.timeout = api.pointee.timeout_new(api, &when, timerCallback, Unmanaged.passUnretained(timer).toOpaque())
    }

    fileprivate func fire(_ timer: AvahiTimer) {
        guard timers.removeValue(forKey: ObjectIdentifier(timer)) != nil else { return }
        if let timeout = timer.timeout { cavahi_threaded_poll_get(poll)!.pointee.timeout_free(timeout) }
        timer.body()
    }

    /// Stops the poll thread, lets `cleanup` free the owner's Avahi objects (an entry group's
    /// free withdraws its records: the daemon sends the goodbyes), then frees the client.
    /// Blocking: call it off the event loops, never on the poll thread.
    func close(cleanup: () -> Void) {
        cavahi_threaded_poll_stop(poll)
        closed = true
        cleanup()
        onState = nil
        if let client { cavahi_client_free(client) }
        client = nil
        cavahi_threaded_poll_free(poll)
        timers.removeAll()
    }

    fileprivate func clientChanged(_ client: OpaquePointer, state: AvahiClientState) {
        self.client = client
        guard let onState, !closed else { return }
        switch state {
        case AVAHI_CLIENT_FAILURE:
            onState(Self.state(of: client))
            // Not inside the client's own callback: the client is freed and replaced next.
            schedule(after: .zero) { [weak self] in self?.reconnect() }
        case AVAHI_CLIENT_CONNECTING:
            break  // waiting for the daemon; `disconnected` was reported at the failure
        default:
            onState(Self.state(of: client))
        }
    }

    private func reconnect() {
        guard !closed else { return }
        if let client { cavahi_client_free(client) }
        client = nil
        var error: Int32 = 0
        // NO_FAIL: wait for the daemon to appear on the bus instead of failing now.
        let made = cavahi_client_new(cavahi_threaded_poll_get(poll), AVAHI_CLIENT_NO_FAIL, clientCallback, Unmanaged.passUnretained(self).toOpaque(), &error)
        if let made {
            client = made
        } else {
            schedule(after: Self.reconnectInterval) { [weak self] in self?.reconnect() }
        }
    }

    private static func state(of client: OpaquePointer) -> State {
        switch cavahi_client_get_state(client) {
        case AVAHI_CLIENT_S_RUNNING: .running
        case AVAHI_CLIENT_S_REGISTERING, AVAHI_CLIENT_S_COLLISION: .registering
        default: .disconnected(reason: describe(cavahi_client_errno(client)))
        }
    }

    static func describe(_ error: Int32) -> String {
        String(cString: cavahi_strerror(error))
    }
}

/// A one-shot Avahi timeout and what it runs.
private final class AvahiTimer {
    weak var owner: AvahiConnection?
    let body: () -> Void
    var timeout: OpaquePointer?

    init(owner: AvahiConnection, _ body: @escaping () -> Void) {
        self.owner = owner
        self.body = body
    }
}

private let clientCallback: AvahiClientCallback = { client, state, userdata in
    guard let client, let userdata else { return }
    Unmanaged<AvahiConnection>.fromOpaque(userdata).takeUnretainedValue().clientChanged(client, state: state)
}

private let timerCallback: AvahiTimeoutCallback = { _, userdata in
    guard let userdata else { return }
    let timer = Unmanaged<AvahiTimer>.fromOpaque(userdata).takeUnretainedValue()
    timer.owner?.fire(timer)
}
