import MultipeerDNS
import MultipeerWire
import NIOCore

/// One browser's mDNS querier and cache, sans-I/O (docs/PROTOCOL.md §12.3, RFC 6762 §5, §10):
/// continuous PTR queries with backoff and known answers, resolution of SRV, TXT and addresses,
/// a bounded cache with TTL expiry and refresh queries, goodbyes, and a liveness check for peers
/// that vanish without one. Reports each peer found once and lost once, and in between each
/// change of the addresses it is seen at (for link recovery, not for the application).
public struct MDNSBrowserCore {
    public struct Endpoint: Hashable, Sendable {
        public let address: MDNSAddress
        public let port: UInt16
        public let interfaceIndex: Int
    }

    public struct FoundPeer: Equatable, Sendable {
        public let peer: WirePeerID
        public let discoveryInfo: [String: String]
        public let endpoints: [Endpoint]
        public let instance: DNSName
    }

    public enum Event: Equatable, Sendable {
        case found(FoundPeer)
        case lost(WirePeerID)
        /// A found peer is seen at other addresses now: it may have moved. Sessions hear it (a
        /// member recovering a lost link redials there, §7.9); an application's delegate does not.
        case moved(FoundPeer)
    }

    public struct Limits: Sendable {
        /// Instances (service names) remembered at once; further ones are ignored until some leave.
        public var maxInstances = 256
        /// Records cached at once.
        public var maxRecords = 4_096
        /// A found peer that has not answered for this long is lost, goodbye or not.
        public var livenessTimeout = TimeAmount.seconds(15)
        public init() {}
    }

    private struct CacheEntry {
        var record: DNSResourceRecord
        var receivedAt: NIODeadline
        var interfaceIndex: Int
        var refreshesSent = 0
        var expires: NIODeadline { receivedAt + .seconds(Int64(record.ttl)) }
    }

    private enum Job {
        case query(generation: Int)
        case maintenance(generation: Int)
    }

    public let serviceType: ServiceType
    public let localIdentifier: Bytes16
    public let limits: Limits
    public private(set) var interfaces: [MDNSInterface]
    public private(set) var isRunning = false
    private var cache: [RecordIdentity: CacheEntry] = [:]
    /// The cache by owner name, so that lookups cost the records of one name, not the whole cache.
    private var byName: [DNSName: Set<RecordIdentity>] = [:]
    /// Per cached instance (so bounded by the instance cap): when it was last heard of, first seen.
    private var lastHeard: [DNSName: NIODeadline] = [:]
    private var firstSeen: [DNSName: NIODeadline] = [:]
    private var lastLivenessQuery: [DNSName: NIODeadline] = [:]
    private var lastResolveQuery: [DNSName: (at: NIODeadline, interval: TimeAmount)] = [:]
    private var discovered: DiscoveredPeers
    private var queryInterval = TimeAmount.seconds(1)
    private var lostSinceLastQuery = false
    private var generation = 0
    private var jobs = JobQueue<Job>()
    private var packets: [MDNSPacket] = []
    private var events: [Event] = []
    private var random: any RandomNumberGenerator

    static let maintenanceInterval = TimeAmount.milliseconds(250)
    static let maxQueryInterval = TimeAmount.minutes(60)

    public init(
        serviceType: ServiceType, localIdentifier: Bytes16, interfaces: [MDNSInterface], limits: Limits = Limits(),
        random: any RandomNumberGenerator = SystemRandomNumberGenerator()
    ) {
        self.serviceType = serviceType
        self.localIdentifier = localIdentifier
        discovered = DiscoveredPeers(localIdentifier: localIdentifier)
        self.interfaces = interfaces
        self.limits = limits
        self.random = random
    }

    /// Peers currently found.
    public var foundPeers: [FoundPeer] { discovered.reported.values.sorted { $0.peer.identifier < $1.peer.identifier } }
    public var cachedRecordCount: Int { cache.count }

    // MARK: Inputs

    public mutating func start(now: NIODeadline) {
        guard !isRunning else { return }
        isRunning = true
        generation += 1
        queryInterval = .seconds(1)
        // RFC 6762 §5.2: the first query after 20-120 ms, so that hosts starting together spread out.
        jobs.schedule(.query(generation: generation), at: now + .milliseconds(Int64.random(in: 20...120, using: &random)))
        jobs.schedule(.maintenance(generation: generation), at: now + Self.maintenanceInterval)
    }

    /// Stops querying; found peers are forgotten without `lost` events (the browser is gone).
    public mutating func stop() {
        isRunning = false
        generation += 1
        cache.removeAll()
        byName.removeAll()
        instanceNames.removeAll()
        firstSeen.removeAll()
        targetOwners.removeAll()
        instancePeers.removeAll()
        dirty.removeAll()
        lastHeard.removeAll()
        lastLivenessQuery.removeAll()
        lastResolveQuery.removeAll()
        discovered.removeAll()
    }

    /// New subnets alone are taken without asking again.
    public mutating func updateInterfaces(_ updated: [MDNSInterface], now: NIODeadline) {
        let unchanged = updated.isSameForPublishing(as: interfaces)
        interfaces = updated
        guard !unchanged else { return }
        let indices = Set(updated.map(\.index))
        // Records learned on an interface that went away are gone with it.
        for (key, entry) in cache where !indices.contains(entry.interfaceIndex) { remove(key) }
        reconcile(everything: true)
        if isRunning {
            // Ask again at once on the new set, and restart the backoff.
            queryInterval = .seconds(1)
            generation += 1
            jobs.schedule(.query(generation: generation), at: now + .milliseconds(20))
            jobs.schedule(.maintenance(generation: generation), at: now + Self.maintenanceInterval)
        }
    }

    public mutating func received(_ message: DNSMessage, from source: MDNSSource, now: NIODeadline) {
        // RFC 6762 §6: a response from any port but 5353 is silently ignored; §11: so is one
        // from off the link, which could otherwise plant peers from anywhere.
        guard isRunning, message.isResponse, source.port == MDNS.port, source.isOnLink(among: interfaces) else { return }
        // Names before the addresses that depend on them.
        let ordered = (message.answers + message.additionals).sorted { Self.order($0.type) < Self.order($1.type) }
        for record in ordered { take(record, interfaceIndex: source.interfaceIndex, now: now) }
        reconcile()
    }

    public mutating func advance(now: NIODeadline) {
        for job in jobs.takeDue(now: now) {
            switch job {
            case .query(let jobGeneration) where jobGeneration == generation && isRunning:
                sendServiceQuery(now: now)
                jobs.schedule(.query(generation: generation), at: now + queryInterval)
                queryInterval = min(queryInterval * 2, Self.maxQueryInterval)
            case .maintenance(let jobGeneration) where jobGeneration == generation && isRunning:
                maintain(now: now)
                jobs.schedule(.maintenance(generation: generation), at: now + Self.maintenanceInterval)
                if lostSinceLastQuery {
                    lostSinceLastQuery = false
                    // Restart the backoff (RFC 6762 §5.2 allows a fresh start on a change).
                    queryInterval = .seconds(1)
                    generation += 1
                    jobs.schedule(.query(generation: generation), at: now + .milliseconds(Int64.random(in: 20...120, using: &random)))
                    jobs.schedule(.maintenance(generation: generation), at: now + Self.maintenanceInterval)
                }
            default:
                break
            }
        }
    }

    public var nextDeadline: NIODeadline? { jobs.nextDeadline }

    public mutating func takePackets() -> [MDNSPacket] {
        defer { packets = [] }
        return packets
    }

    public mutating func takeEvents() -> [Event] {
        defer { events = [] }
        return events
    }

    // MARK: The cache

    private static func order(_ type: DNSRecordType) -> Int {
        switch type {
        case .ptr: 0
        case .srv: 1
        case .txt: 2
        default: 3
        }
    }

    private var serviceName: DNSName { serviceType.serviceName }

    /// Instances named by the service's PTR records in the cache, kept as records come and go.
    private var instanceNames: Set<DNSName> = []
    /// SRV target host -> the instances whose SRV names it.
    private var targetOwners: [DNSName: Set<DNSName>] = [:]
    /// Each instance's peer, when its records describe one.
    private var instancePeers: [DNSName: FoundPeer] = [:]
    /// Instances whose records changed since the last reconcile.
    private var dirty: Set<DNSName> = []

    private func records(named name: DNSName) -> [CacheEntry] {
        (byName[name] ?? []).compactMap { cache[$0] }
    }

    private func srvTarget(of instance: DNSName) -> (port: UInt16, target: DNSName)? {
        for entry in records(named: instance) {
            if case .srv(_, _, let port, let target) = entry.record.data { return (port, target) }
        }
        return nil
    }


    private mutating func insert(_ entry: CacheEntry) {
        let identity = RecordIdentity(entry.record)
        cache[identity] = entry
        byName[identity.name, default: []].insert(identity)
        indexAdded(identity)
    }

    private mutating func indexAdded(_ identity: RecordIdentity) {
        switch identity.data {
        case .ptr(let instance) where identity.name == serviceName:
            instanceNames.insert(instance)
            dirty.insert(instance)
        case .srv(_, _, _, let target):
            targetOwners[target, default: []].insert(identity.name)
            dirty.insert(identity.name)
        case .a, .aaaa:
            dirty.formUnion(targetOwners[identity.name] ?? [])
        default:
            dirty.insert(identity.name)
        }
    }

    private mutating func indexRemoved(_ identity: RecordIdentity) {
        switch identity.data {
        case .ptr(let instance) where identity.name == serviceName:
            instanceNames.remove(instance)
            dirty.insert(instance)
            lastHeard[instance] = nil
            firstSeen[instance] = nil
            lastResolveQuery[instance] = nil
            lastLivenessQuery[instance] = nil
        case .srv(_, _, _, let target):
            targetOwners[target]?.remove(identity.name)
            if targetOwners[target]?.isEmpty == true { targetOwners[target] = nil }
            dirty.insert(identity.name)
        case .a, .aaaa:
            dirty.formUnion(targetOwners[identity.name] ?? [])
        default:
            dirty.insert(identity.name)
        }
    }

    private mutating func remove(_ identity: RecordIdentity) {
        guard cache.removeValue(forKey: identity) != nil else { return }
        byName[identity.name]?.remove(identity)
        if byName[identity.name]?.isEmpty == true { byName[identity.name] = nil }
        indexRemoved(identity)
    }

    /// Whether a record is about our service: its PTR, an instance's SRV or TXT, or the address
    /// of an instance's SRV target. Everything else on the network is not cached.
    private func isRelevant(_ record: DNSResourceRecord) -> Bool {
        switch record.type {
        case .ptr: return record.name == serviceName
        case .srv, .txt: return record.name != serviceName && record.name.isSubdomain(of: serviceName) && instanceNames.contains(record.name)
        case .a, .aaaa: return targetOwners[record.name] != nil
        default: return false
        }
    }

    private mutating func take(_ record: DNSResourceRecord, interfaceIndex: Int, now: NIODeadline) {
        let identity = RecordIdentity(record)
        if record.ttl == 0 {
            // A goodbye (RFC 6762 §10.1): gone now, whether or not what it depended on (the
            // PTR, say, earlier in the same packet) is still here; `lost` follows at once.
            remove(identity)
            return
        }
        guard isRelevant(record) else { return }
        // A TTL above the largest any responder uses for these records would let a spoofer hold
        // cache places for days (RFC 6762 §10 recommends 75 minutes at most here).
        var record = record
        record.ttl = min(record.ttl, MDNS.serviceRecordTTL)
        if record.cacheFlush {
            // RFC 6762 §10.2: other data for this name and type, older than a second, is stale.
            for key in byName[record.name] ?? [] where key.type == record.type && key.recordClass == record.recordClass && key != identity {
                if let entry = cache[key], now - entry.receivedAt > .seconds(1) { remove(key) }
            }
        }
        if cache[identity] == nil {
            if record.type == .ptr, case .ptr(let instance) = record.data, !instanceNames.contains(instance),
                instanceNames.count >= limits.maxInstances
            {
                // Full: an instance that never resolved to a peer makes way (spoofed names that
                // nobody answers for cannot hold the places of real peers).
                guard let stale = instanceNames.first(where: { instancePeers[$0] == nil && (now - (firstSeen[$0] ?? now)) > .seconds(5) })
                else { return }
                forget(instance: stale)
            }
            guard cache.count < limits.maxRecords else { return }
        }
        insert(CacheEntry(record: record, receivedAt: now, interfaceIndex: interfaceIndex))
        for instance in instances(of: record) where instanceNames.contains(instance) {
            lastHeard[instance] = now
            if firstSeen[instance] == nil { firstSeen[instance] = now }
        }
    }

    /// The instances a record belongs to.
    private func instances(of record: DNSResourceRecord) -> Set<DNSName> {
        switch record.type {
        case .ptr:
            if case .ptr(let instance) = record.data { return [instance] }
            return []
        case .srv, .txt: return [record.name]
        default: return targetOwners[record.name] ?? []
        }
    }

    /// Turns the cache into found and lost peers: re-resolves the instances whose records
    /// changed (all of them when `everything`), then reports the difference.
    private mutating func reconcile(everything: Bool = false) {
        if everything { dirty.formUnion(instancePeers.keys) ; dirty.formUnion(instanceNames) }
        for instance in dirty {
            instancePeers[instance] = instanceNames.contains(instance) ? resolved(instance) : nil
        }
        dirty.removeAll(keepingCapacity: true)
        let changes = discovered.update(instancePeers)
        // A loss means something changed on the network: ask again soon rather than after a
        // long backoff, so a peer that comes back (an outage on either side) is found again.
        if changes.contains(where: { if case .lost = $0 { true } else { false } }) { lostSinceLastQuery = true }
        events += changes
    }

    private func resolved(_ instance: DNSName) -> FoundPeer? {
        var txt: [[UInt8]]?
        for entry in records(named: instance) {
            if case .txt(let strings) = entry.record.data { txt = strings }
        }
        guard let srv = srvTarget(of: instance), let txt else { return nil }
        let endpoints = records(named: srv.target).compactMap { entry -> Endpoint? in
            switch entry.record.data {
            case .a(let value): return Endpoint(address: .ipv4(value), port: srv.port, interfaceIndex: entry.interfaceIndex)
            case .aaaa(let bytes): return Endpoint(address: .ipv6(bytes), port: srv.port, interfaceIndex: entry.interfaceIndex)
            default: return nil
            }
        }
        return DiscoveredPeers.peer(instance: instance, txt: txt, endpoints: endpoints)
    }

    // MARK: Queries and upkeep

    private mutating func sendServiceQuery(now: NIODeadline) {
        // Known answers (RFC 6762 §7.1): PTRs we hold with more than half their TTL left.
        let known = records(named: serviceName).filter { entry in
            entry.record.type == .ptr
                && (entry.expires - now).nanoseconds * 2 > Int64(entry.record.ttl) * 1_000_000_000
        }.map { entry -> DNSResourceRecord in
            var record = entry.record
            record.ttl = UInt32(max(0, (entry.expires - now).nanoseconds / 1_000_000_000))
            return record
        }
        multicastQuery([DNSQuestion(name: serviceName, type: .ptr)], knownAnswers: known)
    }

    private mutating func maintain(now: NIODeadline) {
        // Expiry.
        let expired = cache.filter { $0.value.expires <= now }.map(\.key)
        for key in expired { remove(key) }
        var questions: [DNSQuestion] = []
        // Liveness first: a found peer that has been quiet is asked directly, and dropped when it
        // stays quiet. (First, so that a flood of other questions cannot crowd it out.)
        for found in discovered.reported.values {
            let heard = lastHeard[found.instance] ?? now
            let quiet = now - heard
            if quiet >= limits.livenessTimeout {
                forget(instance: found.instance)
            } else if quiet * 3 >= limits.livenessTimeout,
                lastLivenessQuery[found.instance].map({ (now - $0) * 6 >= limits.livenessTimeout }) ?? true
            {
                lastLivenessQuery[found.instance] = now
                questions.append(DNSQuestion(name: found.instance, type: .srv))
            }
        }
        // Refresh at 80 % and 90 % of the TTL (RFC 6762 §5.2), for records of instances we track.
        for (key, entry) in cache where entry.refreshesSent < 2 {
            let fraction = entry.refreshesSent == 0 ? 8 : 9
            let due = entry.receivedAt + .nanoseconds(Int64(entry.record.ttl) * 100_000_000 * Int64(fraction))
            if now >= due {
                cache[key]?.refreshesSent += 1
                questions.append(DNSQuestion(name: entry.record.name, type: entry.record.type))
            }
        }
        // Resolve instances that lack SRV, TXT or an address, backing off from 1 s.
        for instance in instanceNames where resolved(instance) == nil {
            let last = lastResolveQuery[instance]
            guard last.map({ now - $0.at >= $0.interval }) ?? true else { continue }
            lastResolveQuery[instance] = (now, last.map { min($0.interval * 2, .seconds(60)) } ?? .seconds(1))
            questions.append(DNSQuestion(name: instance, type: .srv))
            questions.append(DNSQuestion(name: instance, type: .txt))
            if let target = srvTarget(of: instance)?.target {
                questions.append(DNSQuestion(name: target, type: .a))
                questions.append(DNSQuestion(name: target, type: .aaaa))
            }
        }
        var seen = Set<DNSQuestion>()
        questions = questions.filter { seen.insert($0).inserted }
        if !questions.isEmpty { multicastQuery(Array(questions.prefix(64)), knownAnswers: []) }
        reconcile(everything: true)
    }

    private mutating func forget(instance: DNSName) {
        for key in byName[instance] ?? [] { remove(key) }
        for key in byName[serviceName] ?? [] where key.data == .ptr(instance) { remove(key) }
        lastHeard[instance] = nil
        lastLivenessQuery[instance] = nil
    }

    /// Sends a query on every interface and family, split into packets within that family's
    /// budget, known answers continued in packets with TC (RFC 6762 §7.2), all at once.
    private mutating func multicastQuery(_ questions: [DNSQuestion], knownAnswers: [DNSResourceRecord]) {
        var split: [Bool: [DNSMessage]] = [:]
        for interface in interfaces {
            for ipv6 in [false, true] where interface.addresses.contains(where: { $0.isIPv6 == ipv6 }) {
                let messages = split[ipv6] ?? QueryPacking.packets(
                    questions: questions, knownAnswers: knownAnswers, budget: ipv6 ? MDNS.ipv6QueryBudget : MDNS.ipv4QueryBudget)
                split[ipv6] = messages
                for message in messages {
                    packets.append(MDNSPacket(message: message, destination: .multicast(interfaceIndex: interface.index, ipv6: ipv6)))
                }
            }
        }
    }
}
