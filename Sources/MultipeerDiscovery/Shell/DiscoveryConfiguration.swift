import Logging
import NIOCore
import NIOPosix
import MultipeerProtocol

/// Where and how discovery runs.
public struct DiscoveryConfiguration: Sendable {
    /// Interface names to use (for example `["lo"]` inside a test's network namespace); nil uses
    /// every up, multicast-capable interface but loopback.
    public var interfaceNames: [String]?
    /// A found peer that stops answering for this long is lost, goodbye or not (docs/PROTOCOL.md §12.3).
    /// With the system engine a peer gone without a goodbye is lost when Avahi's cache expires it.
    public var livenessTimeout: TimeAmount
    /// Which mDNS stack runs discovery; chosen again at each start.
    public var engine: DiscoveryEngine
    public var eventLoop: any EventLoop
    /// Besides warnings, an advertiser logs at info level each name it announces and each
    /// rename (§12.1), with metadata `advertiser` (`announced` or `renamed`) and `instance` (the
    /// instance label), on either engine.
    public var logger: Logger

    public init(
        interfaceNames: [String]? = nil, livenessTimeout: TimeAmount = .seconds(15), engine: DiscoveryEngine = .automatic,
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(),
        logger: Logger = Logger(label: "MultipeerDiscovery", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.interfaceNames = interfaceNames
        self.livenessTimeout = livenessTimeout
        self.engine = engine
        self.eventLoop = eventLoop
        self.logger = logger
    }
}
