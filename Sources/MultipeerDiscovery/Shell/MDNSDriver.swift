import Logging
import MultipeerDNS
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// What the NIO shell needs of a discovery core.
protocol MDNSCore: SendableMetatype {
    mutating func received(_ message: DNSMessage, from source: MDNSSource, now: NIODeadline)
    mutating func advance(now: NIODeadline)
    var nextDeadline: NIODeadline? { get }
    mutating func takePackets() -> [MDNSPacket]
}

extension MDNSAdvertiserCore: MDNSCore {}
extension MDNSBrowserCore: MDNSCore {}

/// The SwiftNIO shell around one discovery core: a UDP socket per interface bound to port 5353
/// (shared with other mDNS stacks through address and port reuse), joined to 224.0.0.251 on that
/// interface only, and the core's timers. IPv4; the cores speak IPv6 too.
final class MDNSDriver<Core: MDNSCore>: @unchecked Sendable {
    let eventLoop: any EventLoop
    /// Loop-confined; the class is `@unchecked Sendable` because every access hops onto the loop.
    private var core: Core
    private var channels: [Int: any Channel] = [:]
    private var timer: Scheduled<Void>?
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

    /// Opens a socket on each interface; fails if none opens.
    func open(_ interfaces: [MDNSInterface]) -> EventLoopFuture<Void> {
        let opened = interfaces.map { interface in
            openSocket(on: interface).map { channel -> (Int, (any Channel)?) in (interface.index, channel) }
                .recover { [logger] error in
                    logger.warning("mDNS socket failed", metadata: ["interface": "\(interface.name)", "error": "\(error)"])
                    return (interface.index, nil)
                }
        }
        return EventLoopFuture.whenAllSucceed(opened, on: eventLoop).flatMapThrowing { [self] results in
            for case (let index, let channel?) in results { channels[index] = channel }
            guard !channels.isEmpty else {
                throw DiscoveryError(.socketFailed, "no mDNS socket could be opened on \(interfaces.map(\.name))")
            }
        }
    }

    private func openSocket(on interface: MDNSInterface) -> EventLoopFuture<any Channel> {
        guard let v4 = interface.addresses.first(where: { !$0.isIPv6 }), case .ipv4(let own) = v4 else {
            return eventLoop.makeFailedFuture(DiscoveryError(.noInterface, "\(interface.name) has no IPv4 address"))
        }
        let device = (try? System.enumerateDevices())?.first { $0.name == interface.name && $0.address?.protocol == .inet }
        let index = interface.index
        return DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(.socketOption(.init(rawValue: SO_REUSEPORT)), value: 1)
            // Room for the largest mDNS message (RFC 6762 §17), so none is cut short.
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 9_000))
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(MDNSInboundHandler(driver: self, interfaceIndex: index))
                }
            }
            .bind(host: "0.0.0.0", port: Int(MDNS.port))
            .flatMap { channel in
                let options = channel as! any SocketOptionProvider
                // Only this socket's own memberships: packets that arrived on other interfaces stay out.
                let multicastAll = ChannelOptions.Types.SocketOption(level: .init(rawValue: Int32(IPPROTO_IP)), name: .init(rawValue: 49))  // IP_MULTICAST_ALL
                return channel.setOption(multicastAll, value: 0)
                    .flatMap { options.setIPMulticastIF(in_addr(s_addr: own.bigEndian)) }
                    .flatMap { options.setIPMulticastTTL(255) }
                    .flatMap { options.setIPMulticastLoop(1) }
                    .flatMap {
                        (channel as! any MulticastChannel).joinGroup(try! SocketAddress(ipAddress: "224.0.0.251", port: Int(MDNS.port)), device: device)
                    }
                    .map { channel }
                    .flatMapErrorThrowing { error in
                        channel.close(promise: nil)
                        throw error
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

    fileprivate func received(_ envelope: AddressedEnvelope<ByteBuffer>, interfaceIndex: Int) {
        guard !closed, let message = try? DNSMessage.decode(envelope.data),
            let address = MDNSInterfaces.mdnsAddress(envelope.remoteAddress), let port = envelope.remoteAddress.port
        else { return }
        core.received(message, from: MDNSSource(address: address, port: UInt16(truncatingIfNeeded: port), interfaceIndex: interfaceIndex), now: eventLoop.now)
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
                guard !ipv6, let channel = channels[interfaceIndex] else { continue }
                let group = try! SocketAddress(ipAddress: "224.0.0.251", port: Int(MDNS.port))
                channel.writeAndFlush(AddressedEnvelope(remoteAddress: group, data: encoded), promise: nil)
            case .unicast(let source):
                guard let channel = channels[source.interfaceIndex], let address = MDNSInterfaces.socketAddress(source.address, port: source.port) else { continue }
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
            let closes = channels.values.map { $0.close().recover { _ in } }
            channels.removeAll()
            return EventLoopFuture.andAllComplete(closes, on: eventLoop)
        }
    }
}

private final class MDNSInboundHandler<Core: MDNSCore>: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    weak var driver: MDNSDriver<Core>?
    let interfaceIndex: Int

    init(driver: MDNSDriver<Core>, interfaceIndex: Int) {
        self.driver = driver
        self.interfaceIndex = interfaceIndex
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        driver?.received(unwrapInboundIn(data), interfaceIndex: interfaceIndex)
    }
}
