import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol

/// One advertiser's or browser's discovery, on the engine `DiscoveryConfiguration.engine` picks
/// at each start: the system engine when asked for (or, with `automatic`, when avahi-daemon
/// answers on the bus), else the embedded one. Start and stop run in call order.
final class DiscoveryService: Sendable {
    typealias MakeSystem = @Sendable (AvahiConnection, [MDNSInterface]) throws(DiscoveryError) -> any DiscoveryRunner

    private let configuration: DiscoveryConfiguration
    private let role: String
    private let makeEmbedded: @Sendable () -> any DiscoveryRunner
    private let makeSystem: MakeSystem
    private let running = Mutex<(runner: any DiscoveryRunner, engine: DiscoveryEngine)?>(nil)
    private let sequencer = OperationSequencer()

    init(configuration: DiscoveryConfiguration, role: String, makeEmbedded: @escaping @Sendable () -> any DiscoveryRunner, makeSystem: @escaping MakeSystem) {
        self.configuration = configuration
        self.role = role
        self.makeEmbedded = makeEmbedded
        self.makeSystem = makeSystem
    }

    /// `embedded` or `system` while running, nil otherwise.
    var engine: DiscoveryEngine? { running.withLock { $0?.engine } }

    func start() async throws(DiscoveryError) {
        try await sequencer.runThrowing { () async throws(DiscoveryError) in try await self.startNow() }
    }

    func stop() async {
        await sequencer.run { await self.stopNow() }
    }

    private func startNow() async throws(DiscoveryError) {
        guard running.withLock({ $0 }) == nil else { return }
        var connection: AvahiConnection?
        if configuration.engine != .embedded {
            do {
                connection = try await Self.connect()
            } catch {
                guard configuration.engine == .automatic else { throw error }
                configuration.logger.debug("avahi-daemon not available; using the embedded engine", metadata: ["reason": "\(error.reason)"])
            }
        }
        let runner: any DiscoveryRunner
        let engine: DiscoveryEngine
        if let connection {
            let interfaces: [MDNSInterface]
            do throws(DiscoveryError) {
                interfaces = try MDNSInterfaces.current(names: configuration.interfaceNames)
                guard !interfaces.isEmpty else {
                    throw DiscoveryError(.noInterface, "no usable interface among \(configuration.interfaceNames ?? ["(all)"])")
                }
                runner = try makeSystem(connection, interfaces)
            } catch {
                await Self.close(connection)
                throw error
            }
            engine = .system
        } else {
            runner = makeEmbedded()
            engine = .embedded
        }
        try await runner.start()
        running.withLock { $0 = (runner, engine) }
        configuration.logger.info("discovery \(role) started", metadata: ["engine": "\(engine)"])
    }

    private func stopNow() async {
        let current = running.withLock { current in defer { current = nil }; return current }
        await current?.runner.stop()
    }

    /// Connects to avahi-daemon on a thread of NIO's blocking pool: D-Bus round trips must not
    /// hold an event loop or the cooperative pool.
    private static func connect() async throws(DiscoveryError) -> AvahiConnection {
        let outcome: Result<AvahiConnection, DiscoveryError>
        do {
            outcome = try await NIOThreadPool.singleton.runIfActive { () -> Result<AvahiConnection, DiscoveryError> in
                do throws(DiscoveryError) {
                    return .success(try AvahiConnection())
                } catch {
                    return .failure(error)
                }
            }
        } catch {
            throw DiscoveryError(.systemUnavailable, "\(error)")
        }
        return try outcome.get()
    }

    private static func close(_ connection: AvahiConnection) async {
        _ = try? await NIOThreadPool.singleton.runIfActive { connection.close {} }
    }

    deinit {
        // Released while running: stop anyway, so peers hear the goodbye at once.
        if let current = running.withLock({ $0 }) { Task { await current.runner.stop() } }
    }
}
