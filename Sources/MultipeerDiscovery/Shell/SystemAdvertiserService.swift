import Logging
import NIOCore
import NIOPosix

/// The system engine's advertiser: `SystemAdvertiserCore` carried out on an Avahi entry group.
/// Everything but start and stop runs on the connection's poll thread (Avahi's callbacks).
final class SystemAdvertiserService: DiscoveryRunner, @unchecked Sendable {
    private let connection: AvahiConnection
    private let logger: Logger
    /// Confined to the poll thread or its lock, as `group`.
    private var core: SystemAdvertiserCore
    private var group: AvahiEntryGroup?
    /// A publish that failed while starting, thrown by `start()`.
    private var startFailure: DiscoveryError?

    init(connection: AvahiConnection, core: SystemAdvertiserCore, logger: Logger) {
        self.connection = connection
        self.core = core
        self.logger = logger
    }

    func start() async throws(DiscoveryError) {
        try await onBlockingPool { () throws(DiscoveryError) in
            do throws(DiscoveryError) {
                // The first state arrives inside `start`, before the poll thread runs.
                try self.connection.start { [weak self] state in self?.daemon(state) }
                if let failure = self.startFailure { throw failure }
            } catch {
                self.connection.close { self.freeGroup() }
                throw error
            }
        }
    }

    func stop() async {
        // Freeing the group withdraws the records: avahi-daemon sends the goodbyes.
        try? await onBlockingPool { () throws(DiscoveryError) in self.connection.close { self.freeGroup() } }
    }

    private func daemon(_ state: AvahiConnection.State) {
        switch state {
        case .running: carry(core.daemonRan())
        case .registering: carry(core.daemonRegistering())
        case .disconnected(let reason):
            logger.warning("avahi-daemon went away; advertising resumes when it is back", metadata: ["reason": "\(reason)"])
            core.daemonLost()
            freeGroup()
        }
    }

    private func groupChanged(_ state: AvahiEntryGroup.State) {
        switch state {
        case .established: core.established()
        case .collision: carry(core.collision(now: .now()))
        case .failure(let reason): logger.warning("avahi-daemon could not publish", metadata: ["reason": "\(reason)"])
        case .pending: break
        }
        for event in core.takeEvents() { event.log(to: logger, instanceLabel: core.publication.instanceLabel) }
    }

    private func carry(_ actions: [SystemAdvertiserCore.Action]) {
        for action in actions {
            switch action {
            case .withdraw:
                group?.reset()
            case .publish(let publication):
                do throws(DiscoveryError) {
                    if group == nil, let client = connection.client {
                        group = try AvahiEntryGroup(client: client) { [weak self] state in self?.groupChanged(state) }
                    }
                    try group?.publish(publication)
                } catch {
                    startFailure = startFailure ?? error
                    logger.warning("avahi-daemon refused to publish", metadata: ["reason": "\(error.reason)"])
                }
            case .wake(let delay):
                connection.schedule(after: delay) { [weak self] in
                    guard let self else { return }
                    carry(core.wake())
                }
            }
        }
        for event in core.takeEvents() { event.log(to: logger, instanceLabel: core.publication.instanceLabel) }
    }

    private func freeGroup() {
        group?.free()
        group = nil
    }
}

/// Runs blocking Avahi work (D-Bus round trips) on NIO's blocking pool, never on an event loop.
func onBlockingPool(_ body: @escaping @Sendable () throws(DiscoveryError) -> Void) async throws(DiscoveryError) {
    let outcome: Result<Void, DiscoveryError>
    do {
        outcome = try await NIOThreadPool.singleton.runIfActive { () -> Result<Void, DiscoveryError> in
            do throws(DiscoveryError) {
                try body()
                return .success(())
            } catch {
                return .failure(error)
            }
        }
    } catch {
        throw DiscoveryError(.systemUnavailable, "\(error)")
    }
    try outcome.get()
}
