import Logging
import MultipeerWire
import MultipeerProtocol

/// Advertises one peer on the LAN (docs/PROTOCOL.md §12.1) until stopped or released, on the
/// engine the configuration picks.
public final class DiscoveryAdvertiser: Sendable {
    public let peer: WirePeerID
    public let serviceType: ServiceType
    public let discoveryInfo: [String: String]
    public let port: UInt16
    private let service: DiscoveryService

    /// Throws `invalidDiscoveryInfo` for discoveryInfo that does not fit the TXT record.
    public init(
        peer: WirePeerID, serviceType: ServiceType, discoveryInfo: [String: String], port: UInt16,
        configuration: DiscoveryConfiguration = DiscoveryConfiguration()
    ) throws(DiscoveryError) {
        try DiscoveryTXT.validate(discoveryInfo)
        self.peer = peer
        self.serviceType = serviceType
        self.discoveryInfo = discoveryInfo
        self.port = port
        let logger = configuration.logger
        service = DiscoveryService(
            configuration: configuration, role: "advertiser",
            makeEmbedded: {
                MDNSService(
                    configuration: configuration,
                    makeCore: { interfaces throws(DiscoveryError) in
                        try MDNSAdvertiserCore(serviceType: serviceType, peer: peer, port: port, discoveryInfo: discoveryInfo, interfaces: interfaces)
                    },
                    afterInput: { core in
                        for event in core.takeEvents() { event.log(to: logger, instanceLabel: core.instanceLabel) }
                    },
                    begin: { core, now in core.start(now: now) },
                    end: { core, now in core.stop(now: now) })
            },
            makeSystem: { connection, interfaces throws(DiscoveryError) in
                let core = try SystemAdvertiserCore(serviceType: serviceType, peer: peer, port: port, discoveryInfo: discoveryInfo, interfaces: interfaces)
                return SystemAdvertiserService(connection: connection, core: core, interfaceNames: configuration.interfaceNames, logger: logger)
            })
    }

    /// Starts advertising (the embedded engine opens its sockets and starts probing; the system
    /// engine hands the records to avahi-daemon); throws when that cannot be done. Calling it
    /// while advertising does nothing.
    public func start() async throws(DiscoveryError) { try await service.start() }

    /// Says goodbye (TTL 0 records). Released while advertising, the advertiser says goodbye too.
    public func stop() async { await service.stop() }

    /// `embedded` or `system` while advertising, nil otherwise.
    public var engine: DiscoveryEngine? { service.engine }
}

extension MDNSAdvertiserCore.Event {
    /// Logs the event at info level with metadata `advertiser` (`renamed` or `announced`) and
    /// `instance` (the instance label now held), on either engine: the hook
    /// `DiscoveryConfiguration.logger` gives programs that show or test the name they end up with.
    func log(to logger: Logger, instanceLabel: String) {
        let (kind, label) =
            switch self {
            case .renamed(let name): ("renamed", String(decoding: name.labels[0], as: UTF8.self))
            case .announced: ("announced", instanceLabel)
            }
        logger.info("advertiser \(kind) \(label)", metadata: ["advertiser": "\(kind)", "instance": "\(label)"])
    }
}
