import MultipeerWire
import NIOCore
import Synchronization

/// Advertises one peer on the LAN (docs/PROTOCOL.md §12.1) until stopped or released.
public final class DiscoveryAdvertiser: Sendable {
    public let peer: WirePeerID
    public let serviceType: ServiceType
    public let discoveryInfo: [String: String]
    public let port: UInt16
    private let configuration: DiscoveryConfiguration
    private let driver = Mutex<MDNSDriver<MDNSAdvertiserCore>?>(nil)
    /// Start and stop run one at a time, in the order they were called.
    private let sequencer = OperationSequencer()

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
        self.configuration = configuration
    }

    /// Opens the sockets and starts probing; throws when no interface can be used. Calling it
    /// while advertising does nothing.
    public func start() async throws(DiscoveryError) {
        let outcome = await sequencer.run { () async -> DiscoveryError? in
            do throws(DiscoveryError) {
                try await self.startNow()
                return nil
            } catch {
                return error
            }
        }
        if let outcome { throw outcome }
    }

    private func startNow() async throws(DiscoveryError) {
        guard driver.withLock({ $0 }) == nil else { return }
        let interfaces = try MDNSInterfaces.current(names: configuration.interfaceNames)
        guard !interfaces.isEmpty else { throw DiscoveryError(.noInterface, "no usable interface among \(configuration.interfaceNames ?? ["(all)"])") }
        let core = try MDNSAdvertiserCore(serviceType: serviceType, peer: peer, port: port, discoveryInfo: discoveryInfo, interfaces: interfaces)
        let logger = configuration.logger
        let made = MDNSDriver(core: core, eventLoop: configuration.eventLoop, logger: logger) { core in
            for event in core.takeEvents() { logger.info("advertiser: \(event)") }
        }
        do {
            try await made.open(interfaces).get()
        } catch let error as DiscoveryError {
            throw error
        } catch {
            throw DiscoveryError(.socketFailed, "\(error)")
        }
        driver.withLock { $0 = made }
        made.withCore { core, now in core.start(now: now) }
    }

    /// Says goodbye (TTL 0 records) and closes the sockets.
    public func stop() async {
        _ = await sequencer.run { () async -> Bool in
            await self.stopNow()
            return true
        }
    }

    private func stopNow() async {
        guard let current = driver.withLock({ current in defer { current = nil }; return current }) else { return }
        try? await current.close { core, now in core.stop(now: now) }.get()
    }

    deinit {
        // Released while advertising: still say goodbye, so browsers lose us at once.
        if let current = driver.withLock({ $0 }) { _ = current.close { core, now in core.stop(now: now) } }
    }
}
