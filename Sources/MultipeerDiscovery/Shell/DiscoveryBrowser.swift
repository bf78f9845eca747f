import MultipeerWire
import NIOCore
import Synchronization

/// Browses the LAN for peers advertising a service type (docs/PROTOCOL.md §12.3).
public final class DiscoveryBrowser: Sendable {
    public typealias Event = MDNSBrowserCore.Event

    public let localPeer: WirePeerID
    public let serviceType: ServiceType
    private let configuration: DiscoveryConfiguration
    private let onEvent: @Sendable (Event) -> Void
    private let driver = Mutex<MDNSDriver<MDNSBrowserCore>?>(nil)
    /// Start and stop run one at a time, in the order they were called.
    private let sequencer = OperationSequencer()

    /// `onEvent` is called on the network thread, for each peer found and lost, in order.
    public init(
        localPeer: WirePeerID, serviceType: ServiceType, configuration: DiscoveryConfiguration = DiscoveryConfiguration(),
        onEvent: @escaping @Sendable (Event) -> Void
    ) {
        self.localPeer = localPeer
        self.serviceType = serviceType
        self.configuration = configuration
        self.onEvent = onEvent
    }

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
        var limits = MDNSBrowserCore.Limits()
        limits.livenessTimeout = configuration.livenessTimeout
        let core = MDNSBrowserCore(serviceType: serviceType, localIdentifier: localPeer.identifier, interfaces: interfaces, limits: limits)
        let onEvent = onEvent
        let made = MDNSDriver(core: core, eventLoop: configuration.eventLoop, logger: configuration.logger) { core in
            for event in core.takeEvents() { onEvent(event) }
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

    public func stop() async {
        _ = await sequencer.run { () async -> Bool in
            await self.stopNow()
            return true
        }
    }

    private func stopNow() async {
        guard let current = driver.withLock({ current in defer { current = nil }; return current }) else { return }
        try? await current.close { core, _ in core.stop() }.get()
    }

    deinit {
        if let current = driver.withLock({ $0 }) { _ = current.close { core, _ in core.stop() } }
    }
}
