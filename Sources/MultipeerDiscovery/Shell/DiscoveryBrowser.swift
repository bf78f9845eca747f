import MultipeerWire
import MultipeerProtocol

/// Browses the LAN for peers advertising a service type (docs/PROTOCOL.md §12.3), on the engine
/// the configuration picks.
public final class DiscoveryBrowser: Sendable {
    public typealias Event = MDNSBrowserCore.Event

    public let localPeer: WirePeerID
    public let serviceType: ServiceType
    private let service: DiscoveryService

    /// `onEvent` is called on the configuration's event loop, for each peer found and lost, in order.
    public init(
        localPeer: WirePeerID, serviceType: ServiceType, configuration: DiscoveryConfiguration = DiscoveryConfiguration(),
        onEvent: @escaping @Sendable (Event) -> Void
    ) {
        self.localPeer = localPeer
        self.serviceType = serviceType
        let limits = {
            var limits = MDNSBrowserCore.Limits()
            limits.livenessTimeout = configuration.livenessTimeout
            return limits
        }()
        service = DiscoveryService(
            configuration: configuration, role: "browser",
            makeEmbedded: {
                MDNSService(
                    configuration: configuration,
                    makeCore: { interfaces in
                        MDNSBrowserCore(serviceType: serviceType, localIdentifier: localPeer.identifier, interfaces: interfaces, limits: limits)
                    },
                    afterInput: { core in
                        for event in core.takeEvents() { onEvent(event) }
                    },
                    begin: { core, now in core.start(now: now) },
                    end: { core, _ in core.stop() })
            },
            makeSystem: { connection, _ in
                SystemBrowserService(
                    connection: connection, interfaceNames: configuration.interfaceNames,
                    core: SystemBrowserCore(serviceType: serviceType, localIdentifier: localPeer.identifier, limits: limits),
                    eventLoop: configuration.eventLoop, logger: configuration.logger, onEvent: onEvent)
            })
    }

    public func start() async throws(DiscoveryError) { try await service.start() }

    public func stop() async { await service.stop() }

    /// `embedded` or `system` while browsing, nil otherwise.
    public var engine: DiscoveryEngine? { service.engine }
}
