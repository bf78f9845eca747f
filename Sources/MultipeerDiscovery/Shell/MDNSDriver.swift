import Logging
import MultipeerDNS
import NIOCore
import MultipeerProtocol

/// What the NIO shell needs of a discovery core.
protocol MDNSCore: SendableMetatype {
    mutating func received(_ message: DNSMessage, from source: MDNSSource, now: NIODeadline)
    mutating func advance(now: NIODeadline)
    var nextDeadline: NIODeadline? { get }
    mutating func takePackets() -> [MDNSPacket]
    mutating func updateInterfaces(_ updated: [MDNSInterface], now: NIODeadline)
}

extension MDNSAdvertiserCore: MDNSCore {}
extension MDNSBrowserCore: MDNSCore {}

/// The SwiftNIO shell around one discovery core: an mDNS socket per interface and address
/// family (`MDNSSocket`), and the core's timers.
final class MDNSDriver<Core: MDNSCore>: @unchecked Sendable {
    let eventLoop: any EventLoop
    /// Loop-confined; the class is `@unchecked Sendable` because every access hops onto the loop.
    private var core: Core
    private var channels: [MDNSSocket.Key: any Channel] = [:]
    /// The interface each socket was opened for, as it was then.
    private var socketInterfaces: [MDNSSocket.Key: MDNSInterface] = [:]
    private var timer: Scheduled<Void>?
    private var watch: RepeatedTask?
    /// How often the interfaces are listed again while running.
    static var interfaceCheckInterval: TimeAmount { MDNSInterfaces.checkInterval }
    private var closed = false
    private let afterInput: @Sendable (inout Core) -> Void
    private let logger: Logger

    /// `afterInput` runs on the loop after every input, to take the core's events.
    init(core: Core, eventLoop: any EventLoop, logger: Logger, afterInput: @escaping @Sendable (inout Core) -> Void) {
        self.core = core
        self.eventLoop = eventLoop
        self.logger = logger
        self.afterInput = afterInput
    }

    /// Opens a socket for each family each interface has an address of; fails if none opens.
    func open(_ interfaces: [MDNSInterface]) -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in openSockets(interfaces) }.flatMapThrowing { [self] in
            guard !channels.isEmpty else {
                throw DiscoveryError(.socketFailed, "no mDNS socket could be opened on \(interfaces.map(\.name))")
            }
        }
    }

    /// Opens the sockets `interfaces` need and this driver lacks; one that fails is logged and
    /// left out (and tried again at the next interface check). On the loop.
    private func openSockets(_ interfaces: [MDNSInterface]) -> EventLoopFuture<Void> {
        let wanted = interfaces.flatMap { interface in
            [false, true].filter { ipv6 in
                interface.addresses.contains { $0.isIPv6 == ipv6 } && channels[MDNSSocket.Key(interfaceIndex: interface.index, ipv6: ipv6)] == nil
            }.map { (interface, $0) }
        }
        let opened = wanted.map { interface, ipv6 in
            let key = MDNSSocket.Key(interfaceIndex: interface.index, ipv6: ipv6)
            return MDNSSocket.open(on: interface, ipv6: ipv6, eventLoop: eventLoop) { MDNSInboundHandler(driver: self, key: key) }
                .map { channel -> (MDNSSocket.Key, (any Channel)?) in (key, channel) }
                .recover { [logger] error in
                    logger.warning("mDNS socket failed", metadata: ["interface": "\(interface.name)", "ipv6": "\(ipv6)", "error": "\(error)"])
                    return (key, nil)
                }
        }
        return EventLoopFuture.whenAllSucceed(opened, on: eventLoop).map { [self] results in
            for case (let key, let channel?) in results {
                if closed || channels[key] != nil {
                    channel.close(promise: nil)
                } else {
                    channels[key] = channel
                    socketInterfaces[key] = interfaces.first { $0.index == key.interfaceIndex }
                    forgetWhenClosed(channel, key: key)
                }
            }
        }
    }

    /// SwiftNIO closes a UDP socket when a send fails with most errors: EPERM from a firewall
    /// that drops the packet, ENETUNREACH, ENOBUFS. A socket closed that way is forgotten, so
    /// the next interface check (within `interfaceCheckInterval`) opens it again, and discovery
    /// goes on through lossy or filtered links. On the loop.
    private func forgetWhenClosed(_ channel: any Channel, key: MDNSSocket.Key) {
        channel.closeFuture.whenComplete { [self] _ in
            guard !closed, let current = channels[key], current === channel else { return }
            channels[key] = nil
            socketInterfaces[key] = nil
            logger.info("mDNS socket closed after an error; opening it again", metadata: ["interface": "\(key.interfaceIndex)", "ipv6": "\(key.ipv6)"])
        }
    }

    /// Lists the interfaces again every `interfaceCheckInterval` until closed, and follows what changed.
    func watchInterfaces(names: [String]?) {
        eventLoop.execute { [self] in
            guard !closed, watch == nil else { return }
            let interval = Self.interfaceCheckInterval
            watch = eventLoop.scheduleRepeatedAsyncTask(initialDelay: interval, delay: interval) { [self] _ in
                guard let current = try? MDNSInterfaces.current(names: names) else { return eventLoop.makeSucceededVoidFuture() }
                return update(current)
            }
        }
    }

    /// Follows a change of interfaces (one came or went, an address changed): sockets for the
    /// new ones first, so that the core's announcements there go out; then the core; then the
    /// sockets of those gone are closed (no goodbye is possible on an interface that is gone).
    func update(_ interfaces: [MDNSInterface]) -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in
            guard !closed else { return eventLoop.makeSucceededVoidFuture() }
            let byIndex = Dictionary(interfaces.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
            // A socket whose interface is gone or changed its addresses of that family (IPv4
            // pins its multicast interface by address) is replaced.
            for (key, old) in socketInterfaces {
                let family = { (interface: MDNSInterface) in interface.addresses.filter { $0.isIPv6 == key.ipv6 } }
                if let current = byIndex[key.interfaceIndex], current.name == old.name, family(current) == family(old) { continue }
                channels.removeValue(forKey: key)?.close(promise: nil)
                socketInterfaces[key] = nil
            }
            return openSockets(interfaces).map { [self] in
                guard !closed else { return }
                core.updateInterfaces(interfaces, now: eventLoop.now)
                afterInput(&core)
                flush()
            }
        }
    }

    /// Runs `body` on the core, then sends what it produced and re-arms the timer.
    func withCore(_ body: @escaping @Sendable (inout Core, NIODeadline) -> Void) {
        eventLoop.execute { [self] in
            guard !closed else { return }
            body(&core, eventLoop.now)
            afterInput(&core)
            flush()
        }
    }

    fileprivate func received(_ envelope: AddressedEnvelope<ByteBuffer>, on key: MDNSSocket.Key) {
        var interfaceIndex = key.interfaceIndex
        // Without the packet info, the packet is taken as sent straight to us: the stricter on-link test.
        var sentToGroup = false
        if let arrival = envelope.metadata?.packetInfo {
            // A multicast reaches all our sockets of the family: the arrival interface's takes it.
            // A unicast reaches one (whichever the kernel picked): it belongs to its arrival interface.
            guard arrival.interfaceIndex == key.interfaceIndex || !arrival.destinationAddress.isMulticast else { return }
            interfaceIndex = arrival.interfaceIndex
            sentToGroup = MDNSInterfaces.mdnsAddress(arrival.destinationAddress)?.isMDNSGroup ?? false
        }
        guard !closed, let message = try? DNSMessage.decode(envelope.data),
            let address = MDNSInterfaces.mdnsAddress(envelope.remoteAddress), let port = envelope.remoteAddress.port
        else { return }
        core.received(message, from: MDNSSource(address: address, port: UInt16(truncatingIfNeeded: port), interfaceIndex: interfaceIndex, sentToGroup: sentToGroup), now: eventLoop.now)
        afterInput(&core)
        flush()
    }

    private func flush() {
        for packet in core.takePackets() {
            guard let encoded = try? packet.message.encoded() else {
                logger.warning("an mDNS message did not fit one packet; dropped")
                continue
            }
            switch packet.destination {
            case .multicast(let interfaceIndex, let ipv6):
                guard let channel = channels[MDNSSocket.Key(interfaceIndex: interfaceIndex, ipv6: ipv6)] else { continue }
                channel.writeAndFlush(AddressedEnvelope(remoteAddress: MDNSSocket.group(ipv6: ipv6), data: encoded), promise: nil)
            case .unicast(let source):
                let key = MDNSSocket.Key(interfaceIndex: source.interfaceIndex, ipv6: source.address.isIPv6)
                guard let channel = channels[key] else { continue }
                let address = MDNSInterfaces.socketAddress(source.address, port: source.port, interfaceIndex: source.interfaceIndex)
                channel.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: encoded), promise: nil)
            }
        }
        timer?.cancel()
        timer = nil
        if let deadline = core.nextDeadline {
            timer = eventLoop.scheduleTask(deadline: deadline) { [self] in
                guard !closed else { return }
                core.advance(now: eventLoop.now)
                afterInput(&core)
                flush()
            }
        }
    }

    /// Runs `body` (a last input, such as goodbyes), sends what it produced, then closes the sockets.
    func close(after body: @escaping @Sendable (inout Core, NIODeadline) -> Void) -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in
            guard !closed else { return eventLoop.makeSucceededVoidFuture() }
            body(&core, eventLoop.now)
            afterInput(&core)
            flush()
            closed = true
            timer?.cancel()
            watch?.cancel()
            let closes = channels.values.map { $0.close().recover { _ in } }
            channels.removeAll()
            socketInterfaces.removeAll()
            return EventLoopFuture.andAllComplete(closes, on: eventLoop)
        }
    }
}

private final class MDNSInboundHandler<Core: MDNSCore>: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    weak var driver: MDNSDriver<Core>?
    let key: MDNSSocket.Key

    init(driver: MDNSDriver<Core>, key: MDNSSocket.Key) {
        self.driver = driver
        self.key = key
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        driver?.received(unwrapInboundIn(data), on: key)
    }
}
