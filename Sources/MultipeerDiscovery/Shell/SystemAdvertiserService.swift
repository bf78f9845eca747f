import Logging
import NIOCore
import NIOPosix
import MultipeerProtocol

/// The system engine's advertiser: `SystemAdvertiserCore` carried out on Avahi entry groups, one
/// per interface. Everything but start and stop runs on the connection's poll thread (Avahi's
/// callbacks and timers), which also lists the interfaces again as the embedded engine does.
final class SystemAdvertiserService: DiscoveryRunner, @unchecked Sendable {
    private let connection: AvahiConnection
    private let logger: Logger
    /// The configured interface names (nil: every multicast interface), listed again while running.
    private let interfaceNames: [String]?
    /// Confined to the poll thread or its lock, as `groups`.
    private var core: SystemAdvertiserCore
    /// By interface index.
    private var groups: [Int: AvahiEntryGroup] = [:]
    /// A publish that failed while starting, thrown by `start()`.
    private var startFailure: DiscoveryError?

    init(connection: AvahiConnection, core: SystemAdvertiserCore, interfaceNames: [String]?, logger: Logger) {
        self.connection = connection
        self.core = core
        self.interfaceNames = interfaceNames
        self.logger = logger
    }

    func start() async throws(DiscoveryError) {
        try await onBlockingPool { () throws(DiscoveryError) in
            do throws(DiscoveryError) {
                // The first state arrives inside `start`, before the poll thread runs.
                try self.connection.start { [weak self] state in self?.daemon(state) }
                if let failure = self.startFailure { throw failure }
                try self.connection.locked { self.watchInterfaces() }
            } catch {
                self.connection.close { self.freeGroups() }
                throw error
            }
        }
    }

    func stop() async {
        // Freeing the groups withdraws the records: avahi-daemon sends the goodbyes.
        try? await onBlockingPool { () throws(DiscoveryError) in self.connection.close { self.freeGroups() } }
    }

    /// Lists the interfaces again every `MDNSInterfaces.checkInterval` until closed (the
    /// connection drops its timers then), and follows what changed.
    private func watchInterfaces() {
        connection.schedule(after: MDNSInterfaces.checkInterval) { [weak self] in
            guard let self else { return }
            if let current = try? MDNSInterfaces.current(names: interfaceNames) { carry(core.updateInterfaces(current)) }
            watchInterfaces()
        }
    }

    private func daemon(_ state: AvahiConnection.State) {
        switch state {
        case .running: carry(core.daemonRan())
        case .registering: carry(core.daemonRegistering())
        case .disconnected(let reason):
            logger.warning("avahi-daemon went away; advertising resumes when it is back", metadata: ["reason": "\(reason)"])
            core.daemonLost()
            freeGroups()
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
                // Reset, not freed: a collision arrives inside a group's own callback.
                for group in groups.values { group.reset() }
            case .withdrawFrom(let indexes):
                for index in indexes { groups.removeValue(forKey: index)?.free() }
            case .publish(let publication):
                for interface in publication.interfaces { publish(publication.on(interface)) }
            case .wake(let delay):
                connection.schedule(after: delay) { [weak self] in
                    guard let self else { return }
                    carry(core.wake())
                }
            }
        }
        for event in core.takeEvents() { event.log(to: logger, instanceLabel: core.publication.instanceLabel) }
    }

    private func publish(_ publication: SystemPublication) {
        guard let interface = publication.interfaces.first else { return }
        do throws(DiscoveryError) {
            if groups[interface.index] == nil, let client = connection.client {
                groups[interface.index] = try AvahiEntryGroup(client: client) { [weak self] state in self?.groupChanged(state) }
            }
            try groups[interface.index]?.publish(publication)
        } catch {
            startFailure = startFailure ?? error
            logger.warning("avahi-daemon refused to publish", metadata: ["interface": "\(interface.name)", "reason": "\(error.reason)"])
        }
    }

    private func freeGroups() {
        for group in groups.values { group.free() }
        groups.removeAll()
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
