import Logging
import NIOCore

#if canImport(Glibc)
import Glibc
import MultipeerProtocol
#endif

/// The system engine's browser: `SystemBrowserCore` carried out with Avahi's service browser (on
/// every interface, filtered to the configured ones) and resolvers (one per instance, interface
/// and protocol). Avahi's callbacks run on the connection's poll thread; events go to the event
/// loop, in order.
final class SystemBrowserService: DiscoveryRunner, @unchecked Sendable {
    private let connection: AvahiConnection
    /// nil: every interface the daemon uses.
    private let interfaceNames: [String]?
    private let type: String
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let onEvent: @Sendable (MDNSBrowserCore.Event) -> Void
    /// Confined to the poll thread or its lock, as the Avahi objects.
    private var core: SystemBrowserCore
    private var browser: AvahiServiceBrowser?
    private var resolvers: [SystemServiceKey: AvahiServiceResolver] = [:]
    private var startFailure: DiscoveryError?

    init(
        connection: AvahiConnection, interfaceNames: [String]?, core: SystemBrowserCore, eventLoop: any EventLoop, logger: Logger,
        onEvent: @escaping @Sendable (MDNSBrowserCore.Event) -> Void
    ) {
        self.connection = connection
        self.interfaceNames = interfaceNames
        self.type = "_\(core.serviceType.name)._tcp"
        self.core = core
        self.eventLoop = eventLoop
        self.logger = logger
        self.onEvent = onEvent
    }

    func start() async throws(DiscoveryError) {
        try await onBlockingPool { () throws(DiscoveryError) in
            do throws(DiscoveryError) {
                try self.connection.start { [weak self] state in self?.daemon(state) }
                if let failure = self.startFailure { throw failure }
            } catch {
                self.connection.close { self.freeAll() }
                throw error
            }
        }
    }

    /// Found peers are forgotten without `lost` events, as the embedded browser does.
    func stop() async {
        try? await onBlockingPool { () throws(DiscoveryError) in
            self.connection.close {
                self.freeAll()
                self.core.stop()
            }
        }
        // Events handed to the loop before the close are delivered before stop returns, as with the embedded engine.
        try? await eventLoop.submit {}.get()
    }

    private func daemon(_ state: AvahiConnection.State) {
        switch state {
        case .running:
            guard browser == nil, let client = connection.client else { return }
            do throws(DiscoveryError) {
                browser = try AvahiServiceBrowser(client: client, type: type) { [weak self] event in self?.browserEvent(event) }
            } catch {
                startFailure = startFailure ?? error
                logger.warning("avahi-daemon refused to browse", metadata: ["reason": "\(error.reason)"])
            }
        case .registering:
            break  // browsing goes on while the daemon renames its host
        case .disconnected(let reason):
            // What the daemon knew is gone with it: every found peer is lost, found again when it is back.
            logger.warning("avahi-daemon went away; browsing resumes when it is back", metadata: ["reason": "\(reason)"])
            freeAll()
            core.daemonLost()
            deliver()
        }
    }

    private func browserEvent(_ event: AvahiServiceBrowser.Event) {
        switch event {
        case .new(let key):
            // Looked up by name as each instance comes: an interface added (or re-created under
            // a new index) while browsing counts as soon as it is configured by name.
            if let interfaceNames, !interfaceNames.contains(Self.name(ofInterface: key.interfaceIndex) ?? "") { break }
            carry(core.serviceAdded(key, now: .now()))
        case .remove(let key): carry(core.serviceRemoved(key))
        case .failure(let reason): logger.warning("avahi-daemon browser failed", metadata: ["reason": "\(reason)"])
        }
        deliver()
    }

    private func resolverEvent(_ key: SystemServiceKey, _ event: AvahiServiceResolver.Event) {
        switch event {
        case .found(let address, let port, let txt): core.resolved(key, address: address, port: port, txt: txt)
        case .failure: carry(core.resolveFailed(key))
        }
        deliver()
    }

    private func carry(_ actions: [SystemBrowserCore.Action]) {
        for action in actions {
            switch action {
            case .resolve(let key):
                guard resolvers[key] == nil, let client = connection.client else { continue }
                do throws(DiscoveryError) {
                    resolvers[key] = try AvahiServiceResolver(client: client, key: key, type: type) { [weak self] event in self?.resolverEvent(key, event) }
                } catch {
                    logger.debug("avahi-daemon refused to resolve", metadata: ["instance": "\(key.name)", "reason": "\(error.reason)"])
                    carry(core.resolveFailed(key))
                }
            case .stopResolving(let key):
                resolvers.removeValue(forKey: key)?.free()
            case .retry(let key, let delay):
                connection.schedule(after: delay) { [weak self] in
                    guard let self else { return }
                    carry(core.retry(key))
                    deliver()
                }
            }
        }
    }

    private func deliver() {
        let onEvent = onEvent
        for event in core.takeEvents() { eventLoop.execute { onEvent(event) } }
    }

    private func freeAll() {
        for resolver in resolvers.values { resolver.free() }
        resolvers.removeAll()
        browser?.free()
        browser = nil
    }

    private static func name(ofInterface index: Int) -> String? {
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(UInt32(truncatingIfNeeded: index), &name) != nil else { return nil }
        return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
