import NIOCore
import Synchronization
import MultipeerProtocol

/// One discovery core on its sockets: started on the configured interfaces, stopped with a last
/// input (goodbyes), and stopped that way too when released. Start and stop run in call order.
final class MDNSService<Core: MDNSCore>: Sendable {
    typealias Input = @Sendable (inout Core, NIODeadline) -> Void

    private let configuration: DiscoveryConfiguration
    private let makeCore: @Sendable ([MDNSInterface]) throws(DiscoveryError) -> Core
    private let afterInput: @Sendable (inout Core) -> Void
    private let begin: Input
    private let end: Input
    private let driver = Mutex<MDNSDriver<Core>?>(nil)
    private let sequencer = OperationSequencer()

    init(
        configuration: DiscoveryConfiguration, makeCore: @escaping @Sendable ([MDNSInterface]) throws(DiscoveryError) -> Core,
        afterInput: @escaping @Sendable (inout Core) -> Void, begin: @escaping Input, end: @escaping Input
    ) {
        self.configuration = configuration
        self.makeCore = makeCore
        self.afterInput = afterInput
        self.begin = begin
        self.end = end
    }

    /// Throws when no interface can be used; does nothing while running.
    func start() async throws(DiscoveryError) {
        try await sequencer.runThrowing { () async throws(DiscoveryError) in try await self.startNow() }
    }

    func stop() async {
        await sequencer.run { await self.stopNow() }
    }

    private func startNow() async throws(DiscoveryError) {
        guard driver.withLock({ $0 }) == nil else { return }
        let interfaces = try MDNSInterfaces.current(names: configuration.interfaceNames)
        guard !interfaces.isEmpty else {
            throw DiscoveryError(.noInterface, "no usable interface among \(configuration.interfaceNames ?? ["(all)"])")
        }
        let made = MDNSDriver(core: try makeCore(interfaces), eventLoop: configuration.eventLoop, logger: configuration.logger, afterInput: afterInput)
        do {
            try await made.open(interfaces).get()
        } catch let error as DiscoveryError {
            throw error
        } catch {
            throw DiscoveryError(.socketFailed, "\(error)")
        }
        driver.withLock { $0 = made }
        made.withCore(begin)
        made.watchInterfaces(names: configuration.interfaceNames)
    }

    private func stopNow() async {
        guard let current = driver.withLock({ current in defer { current = nil }; return current }) else { return }
        try? await current.close(after: end).get()
    }

    deinit {
        // Released while running: still send the last input, so peers hear the goodbye at once.
        if let current = driver.withLock({ $0 }) { _ = current.close(after: end) }
    }
}
