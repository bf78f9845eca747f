import MultipeerDNS
import MultipeerTestSupport
import MultipeerWire
import NIOCore

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// Discovery cores on one or more virtual LAN segments and a virtual clock, no sockets. Every
/// packet is encoded and decoded with the real codec on its way, multicast reaches every node on
/// the segment (the sender too, as IP_MULTICAST_LOOP does), unicast reaches its addressee.
final class VirtualLAN {
    private(set) var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
    private var random: SeededGenerator
    private(set) var nodes: [Node] = []
    var latency = TimeAmount.milliseconds(1)
    /// Every packet put on the wire, for counting.
    private(set) var sent: [(from: Int, packet: MDNSPacket)] = []
    private var inFlight: [(time: NIODeadline, sequence: Int, deliver: () -> Void)] = []
    private var sequence = 0

    final class Node {
        let index: Int
        /// Interface index -> segment number.
        let segments: [Int: Int]
        var advertisers: [MDNSAdvertiserCore] = []
        var browsers: [MDNSBrowserCore] = []
        var isReachable = true
        fileprivate(set) var browserEvents: [MDNSBrowserCore.Event] = []
        fileprivate(set) var advertiserEvents: [MDNSAdvertiserCore.Event] = []

        init(index: Int, segments: [Int: Int]) {
            self.index = index
            self.segments = segments
        }

        /// 10.0.<segment>.<node + 1>, in the segment's 10.0.<segment>.0/24.
        func address(on interfaceIndex: Int) -> MDNSAddress { VirtualLAN.address(segment: segments[interfaceIndex]!, host: index + 1) }

        var interfaces: [MDNSInterface] {
            segments.keys.sorted().map { index in
                MDNSInterface(index: index, name: "veth\(index)", addresses: [address(on: index)], subnets: [MDNSSubnet(address: address(on: index), prefixLength: 24)])
            }
        }

        var found: [WirePeerID] {
            var current: [Bytes16: WirePeerID] = [:]
            for event in browserEvents {
                switch event {
                case .found(let peer): current[peer.peer.identifier] = peer.peer
                case .lost(let peer): current[peer.identifier] = nil
                case .moved: break
                }
            }
            return current.values.sorted { $0.identifier < $1.identifier }
        }
    }

    init(seed: UInt64) { random = SeededGenerator(seed: seed) }

    /// An address on a segment's subnet, 10.0.<segment>.<host>/24 (host 1-254).
    static func address(segment: Int, host: Int) -> MDNSAddress { .ipv4(0x0A00_0000 | UInt32(segment) << 8 | UInt32(host & 0xFF)) }

    @discardableResult
    func addNode(segments: [Int: Int] = [1: 0]) -> Node {
        let node = Node(index: nodes.count, segments: segments)
        nodes.append(node)
        return node
    }

    func peer(_ name: String) -> WirePeerID {
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255, using: &random) }
        return try! WirePeerID(identifier: Bytes16(bytes: bytes)!, displayName: name)
    }

    @discardableResult
    func advertise(on node: Node, peer: WirePeerID, port: UInt16 = 7000, info: [String: String] = [:], service: String = "chat") throws -> Int {
        var core = try MDNSAdvertiserCore(
            serviceType: try ServiceType(service), peer: peer, port: port, discoveryInfo: info, interfaces: node.interfaces,
            random: SeededGenerator(seed: random.next()))
        core.start(now: now)
        node.advertisers.append(core)
        flush(node)
        return node.advertisers.count - 1
    }

    @discardableResult
    func browse(on node: Node, localIdentifier: Bytes16 = Bytes16(high: 0, low: 1), service: String = "chat", limits: MDNSBrowserCore.Limits = .init()) throws -> Int {
        var core = MDNSBrowserCore(
            serviceType: try ServiceType(service), localIdentifier: localIdentifier, interfaces: node.interfaces, limits: limits,
            random: SeededGenerator(seed: random.next()))
        core.start(now: now)
        node.browsers.append(core)
        flush(node)
        return node.browsers.count - 1
    }

    func stopAdvertising(on node: Node, _ index: Int = 0) {
        node.advertisers[index].stop(now: now)
        flush(node)
    }

    /// Puts a message on a segment as if a (possibly hostile) host there sent it: to the mDNS
    /// group, or (`toGroup` false) straight to each node on the segment.
    func inject(_ message: DNSMessage, segment: Int, from source: MDNSAddress, port: UInt16 = MDNS.port, toGroup: Bool = true) {
        deliver(message, toSegment: segment, from: source, port: port, toGroup: toGroup)
    }

    // MARK: Running

    func run(for duration: TimeAmount) {
        let end = now + duration
        while let next = nextEventTime(), next <= end {
            step(to: next)
        }
        now = end
    }

    @discardableResult
    func run(until condition: () -> Bool, limit: TimeAmount) -> Bool {
        let end = now + limit
        while !condition() {
            guard let next = nextEventTime(), next <= end else {
                now = end
                return condition()
            }
            step(to: next)
        }
        return true
    }

    private func nextEventTime() -> NIODeadline? {
        let deadlines = nodes.flatMap { node in node.advertisers.compactMap(\.nextDeadline) + node.browsers.compactMap(\.nextDeadline) }
        return (deadlines + inFlight.map(\.time)).min()
    }

    private func step(to time: NIODeadline) {
        now = max(now, time)
        while let first = inFlight.first, first.time <= now {
            inFlight.removeFirst()
            first.deliver()
        }
        for node in nodes {
            for index in node.advertisers.indices { node.advertisers[index].advance(now: now) }
            for index in node.browsers.indices { node.browsers[index].advance(now: now) }
            flush(node)
        }
    }

    /// Takes every core's packets and events, and puts the packets on the wire.
    func flush(_ node: Node) {
        for index in node.advertisers.indices {
            node.advertiserEvents += node.advertisers[index].takeEvents()
            for packet in node.advertisers[index].takePackets() { transmit(packet, from: node) }
        }
        for index in node.browsers.indices {
            node.browserEvents += node.browsers[index].takeEvents()
            for packet in node.browsers[index].takePackets() { transmit(packet, from: node) }
        }
    }

    private func transmit(_ packet: MDNSPacket, from node: Node) {
        sent.append((node.index, packet))
        guard node.isReachable else { return }
        switch packet.destination {
        case .multicast(let interfaceIndex, _):
            guard let segment = node.segments[interfaceIndex] else { return }
            deliver(packet.message, toSegment: segment, from: node.address(on: interfaceIndex), port: MDNS.port, toGroup: true)
        case .unicast(let source):
            guard let target = nodes.first(where: { candidate in candidate.segments.keys.contains { candidate.address(on: $0) == source.address } }),
                let interfaceIndex = target.segments.keys.first(where: { target.address(on: $0) == source.address })
            else { return }
            // From the address of the interface it leaves by, as a host's kernel picks.
            let from = node.segments[source.interfaceIndex] != nil ? node.address(on: source.interfaceIndex) : .ipv4(0)
            schedule { self.receive(packet.message, at: target, interfaceIndex: interfaceIndex, from: from, port: MDNS.port, toGroup: false) }
        }
    }

    private func deliver(_ message: DNSMessage, toSegment segment: Int, from address: MDNSAddress, port: UInt16, toGroup: Bool) {
        for target in nodes {
            for (interfaceIndex, targetSegment) in target.segments where targetSegment == segment {
                schedule { self.receive(message, at: target, interfaceIndex: interfaceIndex, from: address, port: port, toGroup: toGroup) }
            }
        }
    }

    private func schedule(_ deliver: @escaping () -> Void) {
        sequence += 1
        inFlight.append((now + latency, sequence, deliver))
        inFlight.sort { ($0.time, $0.sequence) < ($1.time, $1.sequence) }
    }

    private func receive(_ message: DNSMessage, at node: Node, interfaceIndex: Int, from address: MDNSAddress, port: UInt16, toGroup: Bool) {
        guard node.isReachable else { return }
        // Through the real codec, as on the wire.
        let decoded = try! DNSMessage.decode(try! message.encoded())
        let source = MDNSSource(address: address, port: port, interfaceIndex: interfaceIndex, sentToGroup: toGroup)
        for index in node.advertisers.indices { node.advertisers[index].received(decoded, from: source, now: now) }
        for index in node.browsers.indices { node.browsers[index].received(decoded, from: source, now: now) }
        flush(node)
    }
}

extension MDNSBrowserCore.Event {
    /// A found peer's addresses changed: for sessions, not one of the found and lost events an
    /// application sees.
    var isMove: Bool {
        if case .moved = self { return true }
        return false
    }
}
