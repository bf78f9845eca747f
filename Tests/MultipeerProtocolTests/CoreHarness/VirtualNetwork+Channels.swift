import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerProtocol
import ProtocolTestSupport

/// Streams and resources on the virtual network (docs/PROTOCOL.md §7.6, §7.8): each
/// connection's `ChannelMux` decides, as it does under the NIO shell; in-memory endpoints stand
/// in for the stream and resource objects (bytes in arrays, "files" in a dictionary, SHA-256 fed
/// as bytes arrive), and every frame goes through the connection machines' channel rules.
extension VirtualNetwork {
    static let channelLimits = ChannelMux.Limits(
        channelReceiveWindow: 256 * 1024, connectionReceiveWindow: 1024 * 1024, maximumIncomingResourceSize: 1 << 30,
        maximumIncomingResourcesPerPeer: 4, maximumConcurrentIncomingResources: 8)

    /// Opens a stream from `from` to `to` carrying `content`; nil when they are not connected
    /// or 64 of `from`'s channels to `to` are open.
    @discardableResult
    func openStream(from: Node, to: Node, name: String = "stream", content: [UInt8], holdingData: Bool = false) -> ChannelSource? {
        let source = ChannelSource(kind: .stream, name: name, content: content, transferID: .zero)
        source.holdsData = holdingData
        return open(source, from: from, to: to)
    }

    /// Sends `content` as a resource; `transferID` names it for resuming (§7.8).
    /// `holdingData`: the sender offers and then sends nothing (a peer probing a kept transfer).
    @discardableResult
    func sendResource(
        from: Node, to: Node, name: String = "file", content: [UInt8], transferID: Bytes16 = .zero, holdingData: Bool = false
    ) -> ChannelSource? {
        let source = ChannelSource(kind: .resource, name: name, content: content, transferID: transferID)
        source.holdsData = holdingData
        return open(source, from: from, to: to)
    }

    /// The link between `a` and `b` is lost: each side's transport ends, no GOODBYE.
    func cut(_ a: Node, _ b: Node) {
        for node in [a, b] {
            let other = node === a ? b : a
            for connection in node.openConnectionsTo(other) { connection.closeTransport() }
        }
    }

    private func open(_ source: ChannelSource, from: Node, to: Node) -> ChannelSource? {
        guard let id = from.core.activeLink(to: to.peer.identifier), let driver = from.connection(id)?.channels else { return nil }
        return driver.open(source) ? source : nil
    }
}

/// A node's channel state beyond its connections: what it takes, what it keeps for resuming.
final class NodeChannels {
    /// Whether the application takes the peer's streams and resources.
    var accepting = true
    /// Whether the application reads what arrives at once; false holds it (backpressure).
    var reading = true
    /// Storing a new resource fails (a full disk).
    var storageFails = false
    var resumeStore = ResumeStore(capacity: 16, lifetime: .minutes(10))
    /// The "files" of incoming resources, by path.
    var files: [String: [UInt8]] = [:]
    /// Every incoming stream and resource, in the order they opened.
    private(set) var incoming: [ChannelSink] = []
    /// Bytes fed to SHA-256 by incoming resources, over the node's life.
    var hashedBytes = 0
    /// Frames of ours the connection refused: a bug in the core's decisions.
    var refusals: [SendRefusal] = []
    fileprivate var nextFile = 0

    fileprivate func arrived(_ sink: ChannelSink) { incoming.append(sink) }
}

/// One connection's channels in the harness: the endpoints, driven as the session core's
/// `ChannelMux` for the link decides (the core keeps it in the link's record, as for the shell).
final class ChannelDriver {
    unowned let connection: Connection
    private var outbound: [UInt32: ChannelSource] = [:]
    private var inbound: [UInt32: ChannelSink] = [:]
    /// Channel numbers of the data frames we sent, in order: the turns.
    private(set) var dataTurns: [UInt32] = []

    init(connection: Connection) {
        self.connection = connection
        if let widening = withMux({ $0.connectionWindowWidening }) ?? nil { send(widening) }
    }

    /// The link's mux as the core has it now (a copy, to look at).
    var mux: ChannelMux? { connection.node.core.links[connection.link]?.channels }

    @discardableResult
    private func withMux<Result>(_ body: (inout ChannelMux) -> Result) -> Result? {
        connection.node.core.channels(on: connection.link, body)
    }

    private var node: VirtualNetwork.Node { connection.node }

    fileprivate func open(_ source: ChannelSource) -> Bool {
        guard let channel = withMux({ $0.open(source.kind) }) ?? nil else { return false }
        source.bind(channel, driver: self)
        outbound[channel] = source
        send(source.openingFrame)
        if source.kind == .stream { ready(channel) }
        return true
    }

    /// Sources have something to send.
    func ready(_ channels: UInt32...) {
        for channel in channels { withMux { $0.markReady(channel) } }
        pump()
    }

    func markReady(_ channel: UInt32) { withMux { $0.markReady(channel) } }

    private func pump() {
        while let (channel, allowance) = withMux({ $0.next() }) ?? nil {
            guard let source = outbound[channel] else {
                withMux { $0.endOutbound(channel) }
                continue
            }
            switch source.nextOutput(allowance: allowance) {
            case .data(let bytes):
                withMux { $0.served(channel, .data(bytes.readableBytes)) }
                dataTurns.append(channel)
                send(source.kind == .resource ? .resourceChunk(channel: channel, bytes) : .streamData(channel: channel, bytes))
            case .finish(let frame):
                withMux { $0.served(channel, .idle) }
                send(frame)
                if withMux({ $0.weSend(frame) }) == true { outbound[channel] = nil }
            case .idle:
                withMux { $0.served(channel, .idle) }
            case .blocked:
                withMux { $0.served(channel, .blocked) }
            }
        }
    }

    /// A frame of ours for a channel (an answer, a cancel); only while it is open here.
    func channelSend(_ frame: Frame) {
        guard let verdict = withMux({ mux in mux.weSend(frame).map { ($0, mux.isOurs(frame.channel)) } }) ?? nil else { return }
        send(frame)
        guard verdict.0 else { return }
        if verdict.1 { outbound[frame.channel] = nil } else { inbound[frame.channel] = nil }
    }

    /// The application took (or dropped) bytes of one of the peer's channels.
    func taken(_ bytes: Int, on channel: UInt32) {
        for frame in withMux({ $0.taken([channel: bytes]) }) ?? [] { send(frame) }
    }

    private func endOutbound(_ channel: UInt32) {
        if withMux({ $0.endOutbound(channel) }) == true { outbound[channel] = nil }
    }

    func peerSent(_ frame: Frame) {
        // Read first: it reads this link's mux too, which peerSent changes in place.
        let inSession = node.connectionsIncomingResources
        switch withMux({ $0.peerSent(frame, accepting: node.channels.accepting, incomingResourcesInSession: inSession) }) {
        case nil:
            return  // no longer a member's link
        case .serve:
            pump()
        case .takeStream(let channel, let name, _, let reply):
            let sink = ChannelSink(kind: .stream, name: name, channel: channel, driver: self, offset: 0, file: nil, hasher: nil)
            inbound[channel] = sink
            node.channels.arrived(sink)
            reply.forEach(send)
        case .considerResource(let channel, let offer):
            consider(offer, on: channel)
        case .refuse(_, _, let reply):
            reply.forEach(send)
        case .resumeStream(let channel, _, let reply):
            // The harness keeps no stream across a lost link: the peer hears it ended.
            reply.forEach(send)
            channelSend(.streamReset(channel: channel, code: .cancelled))
        case .acknowledged(let channel, let acknowledgement):
            if acknowledgement.over { outbound[channel] = nil } else { pump() }
        case .violation(let error):
            connection.command { $0.abort(error) }
        case .toOutbound(let channel, let ended):
            (ended ? outbound.removeValue(forKey: channel) : outbound[channel])?.peerSent(frame)
        case .toInbound(let channel, let ended, let reply):
            (ended ? inbound.removeValue(forKey: channel) : inbound[channel])?.peerSent(frame)
            if let reply { send(reply) }
        case .giveBack(let frames):
            frames.forEach(send)
        }
    }

    /// As the shell does: a kept partial resumes; otherwise a new "file", unless storage fails.
    private func consider(_ offer: ResourceOffer, on channel: UInt32) {
        guard let peer = connection.peerIdentifier else { return }
        let channels = node.channels
        let key = ResumeStore.Key(peer: peer, fingerprint: nil, transferID: offer.transferID, size: offer.size)
        let (kept, expired) = channels.resumeStore.take(key, now: connection.network.now)
        for partial in expired { channels.files[partial.path] = nil }
        let sink: ChannelSink
        if let kept, let bytes = channels.files[kept.path], bytes.count >= Int(kept.length) {
            channels.files[kept.path] = Array(bytes.prefix(Int(kept.length)))
            sink = ChannelSink(
                kind: .resource, name: offer.name, channel: channel, driver: self, offset: kept.length, file: kept.path,
                hasher: kept.hashState, offer: offer, key: key, resumed: kept)
        } else {
            if let kept { channels.files[kept.path] = nil }
            guard !channels.storageFails else { return (withMux { $0.resourceRefused(channel) } ?? []).forEach(send) }
            channels.nextFile += 1
            let path = "/resources/\(channels.nextFile).part"
            channels.files[path] = []
            sink = ChannelSink(
                kind: .resource, name: offer.name, channel: channel, driver: self, offset: 0, file: path, hasher: SHA256Hasher(),
                offer: offer, key: key, resumed: nil)
        }
        inbound[channel] = sink
        channels.arrived(sink)
        (withMux { $0.resourceTaken(channel, offset: sink.offset) } ?? []).forEach(send)
    }

    /// The connection ended: every channel fails; an incoming resource keeps its bytes. (The
    /// mux goes with the core's record of the link.)
    func connectionLost() {
        let (sources, sinks) = (outbound.values, inbound.values)
        outbound = [:]
        inbound = [:]
        for source in sources { source.failed() }
        for sink in sinks { sink.failed(now: connection.network.now) }
    }

    fileprivate var incomingResources: Int { mux?.incomingResources ?? 0 }

    private func send(_ frame: Frame) {
        connection.sendChecked(frame)
    }
}

extension VirtualNetwork.Node {
    /// The node's incoming resources across all its connections (the session-wide limit).
    fileprivate var connectionsIncomingResources: Int {
        openChannelDrivers.reduce(0) { $0 + $1.incomingResources }
    }
}

/// What one of our channels carries: `content`, as a stream or a resource.
final class ChannelSource {
    enum Outcome: Equatable {
        case closed
        case delivered
        case reset(StreamResetCode)
        case cancelled(ResourceCancelReason)
        case connectionLost
    }

    let kind: ChannelMux.Kind
    let name: String
    let content: [UInt8]
    let transferID: Bytes16
    private(set) var channel: UInt32 = 0
    private weak var driver: ChannelDriver?
    /// Where sending stands; a resource starts at the receiver's offset.
    private(set) var sent = 0
    private(set) var startedAt: Int?
    private var accepted = false
    private var finished = false
    private(set) var outcome: Outcome?
    /// Sends no data, only the opening frame.
    var holdsData = false

    init(kind: ChannelMux.Kind, name: String, content: [UInt8], transferID: Bytes16) {
        self.kind = kind
        self.name = name
        self.content = content
        self.transferID = transferID
    }

    fileprivate func bind(_ channel: UInt32, driver: ChannelDriver) {
        self.channel = channel
        self.driver = driver
    }

    fileprivate var openingFrame: Frame {
        switch kind {
        case .stream: .streamOpen(channel: channel, name: name)
        case .resource: .resourceOffer(channel: channel, try! ResourceOffer(size: UInt64(content.count), transferID: transferID, name: name))
        }
    }

    fileprivate func nextOutput(allowance: Int) -> ChannelOutput {
        guard outcome == nil, kind == .stream || accepted, !holdsData else { return .idle }
        if sent < content.count {
            guard allowance > 0 else { return .blocked }
            let count = min(allowance, content.count - sent)
            defer { sent += count }
            return .data(ByteBuffer(bytes: content[sent..<sent + count]))
        }
        guard !finished else { return .idle }
        finished = true
        switch kind {
        case .stream:
            outcome = .closed
            return .finish(.streamClose(channel: channel))
        case .resource:
            return .finish(.resourceComplete(channel: channel, sha256: try! SHA256Digest(bytes: SHA256Hasher.digest(content))))
        }
    }

    /// Starts sending what `holdsData` held back, for all of `sources` (one connection's) at once.
    static func release(_ sources: [ChannelSource]) {
        for source in sources { source.holdsData = false }
        guard let driver = sources.first?.driver else { return }
        for source in sources { driver.markReady(source.channel) }
        driver.ready()
    }

    /// The application cancels: RESOURCE_CANCEL 1 or STREAM_RESET 1.
    func cancel() {
        guard outcome == nil else { return }
        outcome = .cancelled(.cancelled)
        let frame: Frame = kind == .resource ? .resourceCancel(channel: channel, reason: .cancelled) : .streamReset(channel: channel, code: .cancelled)
        driver?.channelSend(frame)
    }

    fileprivate func peerSent(_ frame: Frame) {
        switch frame {
        case .resourceAccept(_, let offset):
            accepted = true
            sent = Int(offset)
            startedAt = Int(offset)
            driver?.ready(channel)
        case .resourceReceived:
            outcome = .delivered
        case .resourceCancel(_, let reason):
            outcome = .cancelled(reason)
        case .streamReset(_, let code):
            outcome = .reset(code)
        default:
            break
        }
    }

    fileprivate func failed() {
        if outcome == nil || outcome == .closed && kind == .resource { outcome = .connectionLost }
    }
}

/// One of the peer's channels we took: the bytes that arrived, and how it ended.
final class ChannelSink {
    enum Outcome: Equatable {
        case closed
        case stored
        case reset(StreamResetCode)
        case cancelled(ResourceCancelReason)
        case integrityFailure
        case connectionLost
    }

    let kind: ChannelMux.Kind
    let name: String
    let channel: UInt32
    /// Where a resource started: the kept partial's length, or 0.
    let offset: UInt64
    private weak var driver: ChannelDriver?
    private let node: VirtualNetwork.Node
    private let file: String?
    private let hasher: SHA256Hasher?
    private let offer: ResourceOffer?
    private let key: ResumeStore.Key?
    private let resumed: ResumeStore.Partial?
    /// Stream bytes (a resource's are in its file).
    private(set) var bytes: [UInt8] = []
    /// Bytes the application has not taken yet.
    private(set) var unread = 0
    private(set) var outcome: Outcome?

    fileprivate init(
        kind: ChannelMux.Kind, name: String, channel: UInt32, driver: ChannelDriver, offset: UInt64, file: String?, hasher: SHA256Hasher?,
        offer: ResourceOffer? = nil, key: ResumeStore.Key? = nil, resumed: ResumeStore.Partial? = nil
    ) {
        self.kind = kind
        self.name = name
        self.channel = channel
        self.driver = driver
        self.node = driver.connection.node
        self.offset = offset
        self.file = file
        self.hasher = hasher
        self.offer = offer
        self.key = key
        self.resumed = resumed
    }

    /// The resource's bytes so far.
    var stored: [UInt8] { file.flatMap { node.channels.files[$0] } ?? [] }

    /// The application reads what it held back.
    func read() {
        guard unread > 0 else { return }
        let count = unread
        unread = 0
        driver?.taken(count, on: channel)
    }

    /// The receiving application cancels (RESOURCE_CANCEL 1 / STREAM_RESET 1).
    func cancel() {
        guard outcome == nil else { return }
        outcome = kind == .resource ? .cancelled(.cancelled) : .reset(.cancelled)
        let frame: Frame = kind == .resource ? .resourceCancel(channel: channel, reason: .cancelled) : .streamReset(channel: channel, code: .cancelled)
        if let file { node.channels.files[file] = nil }
        driver?.channelSend(frame)
    }

    fileprivate func peerSent(_ frame: Frame) {
        switch frame {
        case .streamData(_, let data):
            bytes += data.readableBytesView
            arrived(data.readableBytes)
        case .resourceChunk(_, let data):
            if let file { node.channels.files[file, default: []] += data.readableBytesView }
            hasher?.update(Array(data.readableBytesView))
            node.channels.hashedBytes += data.readableBytes
            arrived(data.readableBytes)
        case .streamClose:
            outcome = .closed
        case .streamReset(_, let code):
            outcome = .reset(code)
            if let file { node.channels.files[file] = nil }
        case .resourceCancel(_, let reason):
            outcome = .cancelled(reason)
            if let file { node.channels.files[file] = nil }
        case .resourceComplete(_, let digest):
            let failure =
                ResourceVerdict.length(received: UInt64(stored.count), offered: offer?.size ?? 0)
                ?? ResourceVerdict.digest(computed: hasher?.finalize() ?? [], expected: digest)
            outcome = failure == nil ? .stored : .integrityFailure
            if failure != nil, let file { node.channels.files[file] = nil }
            driver?.channelSend(ResourceVerdict.answer(on: channel, failure: failure))
        default:
            break
        }
    }

    private func arrived(_ count: Int) {
        unread += count
        if node.channels.reading { read() }
    }

    /// The connection ended first: a resource keeps its bytes and their hash state.
    fileprivate func failed(now: NIODeadline) {
        guard outcome == nil else { return }
        outcome = .connectionLost
        guard kind == .resource, let file, let key, let hasher, let copy = hasher.copy() else { return }
        let length = UInt64(stored.count)
        let dropped = node.channels.resumeStore.keep(ResumeStore.Partial(path: file, length: length, hashState: copy), for: key, resumed: resumed, now: now)
        for partial in dropped { node.channels.files[partial.path] = nil }
    }
}
