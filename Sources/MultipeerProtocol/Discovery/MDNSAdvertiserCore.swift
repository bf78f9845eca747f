import MultipeerDNS
import MultipeerWire
import NIOCore

/// One advertising peer's mDNS responder, sans-I/O (docs/PROTOCOL.md §12.1, RFC 6762 §6-§10):
/// probing, announcing, answering queries with known-answer suppression and rate limits,
/// renaming on conflict, goodbye on stop. Inputs are received messages and the time; outputs
/// are packets, taken with `takePackets()`. Randomness (response delays) is injected.
public struct MDNSAdvertiserCore {
    public enum Phase: Equatable, Sendable {
        case idle, probing, announcing, running, stopped
    }

    public enum Event: Equatable, Sendable {
        /// Probing met another responder's records for our name: we moved to this instance name.
        case renamed(DNSName)
        /// Probing succeeded; the records are announced and answered from now on.
        case announced
    }

    private enum Job {
        case probe(round: Int, generation: Int)
        case announce(round: Int, generation: Int)
        case respond(interfaceIndex: Int, ipv6: Bool, generation: Int)
        /// A query with TC waited 400-500 ms for its further known answers.
        case decideTruncated(id: Int, generation: Int)
    }

    public let serviceType: ServiceType
    public let peer: WirePeerID
    public let port: UInt16
    public private(set) var phase = Phase.idle
    public private(set) var interfaces: [MDNSInterface]
    private let txt: [[UInt8]]
    private var naming: InstanceNaming
    /// Bumped when probing restarts or the advertiser stops, so stale jobs do nothing.
    private var generation = 0
    private var jobs = JobQueue<Job>()
    private var packets: [MDNSPacket] = []
    private var events: [Event] = []
    private var random: any RandomNumberGenerator
    /// Records waiting for a delayed multicast answer, per interface and family.
    private var pendingAnswers: [PendingKey: [DNSResourceRecord]] = [:]
    private var lastMulticast: [RateKey: NIODeadline] = [:]
    /// A new probe round is scheduled and has not sent its first probe: conflicts and lost
    /// tie-breaks are not acted on again, so a flood of them adds no jobs and no renames.
    private var probingDeferred = false
    /// Unicast answers (QU questions, legacy queriers) are capped per source address.
    private var unicastBudgets = UnicastAnswerBudgets()
    /// Interfaces where a probe for one of our names is being answered: sooner than the usual
    /// once a second (RFC 6762 §6.2 allows 250 ms), so the prober sees the defence in time.
    private var pendingProbeDefence: Set<PendingKey> = []
    private var truncated = TruncatedQueries()

    private struct PendingKey: Hashable {
        let interfaceIndex: Int
        let ipv6: Bool
    }

    private struct RateKey: Hashable {
        let interfaceIndex: Int
        let ipv6: Bool
        let name: DNSName
        let type: DNSRecordType
    }

    public init(
        serviceType: ServiceType, peer: WirePeerID, port: UInt16, discoveryInfo: [String: String],
        interfaces: [MDNSInterface], random: any RandomNumberGenerator = SystemRandomNumberGenerator()
    ) throws(DiscoveryError) {
        self.serviceType = serviceType
        self.peer = peer
        self.port = port
        self.interfaces = interfaces
        self.random = random
        txt = try DiscoveryTXT.encode(peer, info: discoveryInfo)
        naming = InstanceNaming(serviceType: serviceType, peer: peer)
    }

    // MARK: Names and records

    public var instanceName: DNSName { naming.instanceName }

    /// `hex(I)`, or `hex(I)-2`, ... after renames (docs/PROTOCOL.md §12.1).
    package var instanceLabel: String { naming.instanceLabel }

    /// One per advertiser (peer and service type), so that one advertiser's goodbye never
    /// withdraws the address records another still uses.
    public var hostName: DNSName { naming.hostName }

    static let servicesName = try! DNSName("_services._dns-sd._udp.local")

    /// Every record this peer publishes on an interface (addresses of that family and interface only).
    func records(interfaceIndex: Int, ipv6: Bool, ttlOverride: UInt32? = nil) -> [DNSResourceRecord] {
        func ttl(_ normal: UInt32) -> UInt32 { ttlOverride ?? normal }
        var records = [
            DNSResourceRecord(name: serviceType.serviceName, ttl: ttl(MDNS.serviceRecordTTL), data: .ptr(instanceName)),
            DNSResourceRecord(name: Self.servicesName, ttl: ttl(MDNS.serviceRecordTTL), data: .ptr(serviceType.serviceName)),
            DNSResourceRecord(
                name: instanceName, ttl: ttl(MDNS.hostRecordTTL), data: .srv(priority: 0, weight: 0, port: port, target: hostName),
                cacheFlush: true),
            DNSResourceRecord(name: instanceName, ttl: ttl(MDNS.serviceRecordTTL), data: .txt(txt), cacheFlush: true),
        ]
        records += addressRecords(interfaceIndex: interfaceIndex, ipv6: ipv6, ttl: ttl(MDNS.hostRecordTTL))
        return records
    }

    private func addressRecords(interfaceIndex: Int, ipv6: Bool, ttl: UInt32) -> [DNSResourceRecord] {
        let addresses = interfaces.first { $0.index == interfaceIndex }?.addresses ?? []
        return addresses.compactMap { address in
            switch address {
            case .ipv4(let value) where !ipv6: DNSResourceRecord(name: hostName, ttl: ttl, data: .a(value), cacheFlush: true)
            case .ipv6(let bytes) where ipv6: DNSResourceRecord(name: hostName, ttl: ttl, data: .aaaa(bytes), cacheFlush: true)
            default: nil
            }
        }
    }

    private var multicastTargets: [PendingKey] {
        interfaces.flatMap { interface in
            [false, true].filter { ipv6 in interface.addresses.contains { $0.isIPv6 == ipv6 } }
                .map { PendingKey(interfaceIndex: interface.index, ipv6: $0) }
        }
    }

    // MARK: Inputs

    /// Starts probing after a random 0-250 ms (RFC 6762 §8.1).
    public mutating func start(now: NIODeadline) {
        guard phase == .idle else { return }
        restartProbing(now: now, after: .milliseconds(Int64.random(in: 0...250, using: &random)))
    }

    /// Sends goodbyes (TTL 0) for everything announced, and stops answering.
    public mutating func stop(now: NIODeadline) {
        guard phase != .stopped, phase != .idle else {
            phase = .stopped
            return
        }
        if phase == .running || phase == .announcing {
            for target in multicastTargets {
                let goodbye = records(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6, ttlOverride: 0)
                send(DNSMessage(isResponse: true, isAuthoritative: true, answers: goodbye), to: .multicast(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6))
            }
        }
        phase = .stopped
        generation += 1
        pendingAnswers.removeAll()
        pendingProbeDefence.removeAll()
        dropTruncatedQueries()
    }

    /// The interfaces changed (one came or went, an address changed): announce on the new set.
    /// New subnets alone are taken without announcing.
    public mutating func updateInterfaces(_ updated: [MDNSInterface], now: NIODeadline) {
        let unchanged = updated.isSameForPublishing(as: interfaces)
        interfaces = updated
        guard !unchanged else { return }
        pendingAnswers.removeAll()
        dropTruncatedQueries()
        if phase == .running || phase == .announcing { scheduleAnnouncements(now: now) }
    }

    public mutating func received(_ message: DNSMessage, from source: MDNSSource, now: NIODeadline) {
        // Off-link packets (RFC 6762 §11) neither learn our records nor force a rename.
        guard phase != .idle, phase != .stopped, source.isOnLink(among: interfaces) else { return }
        if message.isResponse {
            // RFC 6762 §6: responses come from port 5353 or are ignored.
            // Until the next probe goes out, another conflict changes nothing: one per probe round.
            guard source.port == MDNS.port, !probingDeferred, conflicts(in: message.answers + message.additionals, source: source)
            else { return }
            if phase == .probing {
                rename(now: now)
            } else {
                // RFC 6762 §9: a conflict after announcing means probing again; only a conflict
                // found while probing renames.
                restartProbing(now: now, after: .zero)
            }
            return
        }
        if phase == .probing {
            // RFC 6762 §8.2: the other prober's data is later; wait a second, then probe again.
            // Once deferred, further probes change nothing (so a probe flood adds no jobs).
            if !probingDeferred, lostProbeTieBreak(message, source: source) {
                restartProbing(now: now, after: .seconds(1))
            }
            return
        }
        answerOrHold(message, from: source, now: now)
    }

    /// Runs whatever is due.
    public mutating func advance(now: NIODeadline) {
        for job in jobs.takeDue(now: now) {
            switch job {
            case .probe(let round, let jobGeneration) where jobGeneration == generation:
                probingDeferred = false
                sendProbes()
                if round < 2 {
                    jobs.schedule(.probe(round: round + 1, generation: generation), at: now + .milliseconds(250))
                } else {
                    // Three probes and 250 ms of silence: the names are ours.
                    jobs.schedule(.announce(round: 0, generation: generation), at: now + .milliseconds(250))
                }
            case .announce(let round, let jobGeneration) where jobGeneration == generation:
                if round == 0 {
                    phase = .announcing
                    events.append(.announced)
                }
                for target in multicastTargets {
                    sendMulticast(records(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6), to: target, now: now, force: true)
                }
                if round == 0 {
                    jobs.schedule(.announce(round: 1, generation: generation), at: now + .seconds(1))
                } else {
                    phase = .running
                }
            case .respond(let interfaceIndex, let ipv6, let jobGeneration) where jobGeneration == generation:
                let key = PendingKey(interfaceIndex: interfaceIndex, ipv6: ipv6)
                let defence = pendingProbeDefence.remove(key) != nil
                if let answers = pendingAnswers.removeValue(forKey: key) {
                    sendMulticast(answers, to: key, now: now, force: false, minimumInterval: defence ? .milliseconds(250) : .seconds(1))
                }
            case .decideTruncated(let id, let jobGeneration) where jobGeneration == generation:
                if let held = truncated.take(id: id) { answer(held.merged, from: held.source, now: now, waited: true) }
            default:
                break  // a job of an earlier generation
            }
        }
    }

    public var nextDeadline: NIODeadline? { jobs.nextDeadline }

    /// Jobs waiting, for tests that check a flood does not grow them.
    var pendingJobCount: Int { jobs.count }
    /// Queries with TC held, and the known answers kept for them, for the same tests.
    var heldTruncatedQueryCount: Int { truncated.held.count }
    var heldKnownAnswerCount: Int { truncated.knownAnswerCount }
    func heldTruncatedQueryCount(from source: MDNSSource) -> Int { truncated.held.count { $0.source == source } }
    /// Sources whose unicast answers are being counted, for the same tests.
    var unicastBudgetSourceCount: Int { unicastBudgets.trackedSourceCount }

    public mutating func takePackets() -> [MDNSPacket] {
        defer { packets = [] }
        return packets
    }

    public mutating func takeEvents() -> [Event] {
        defer { events = [] }
        return events
    }

    // MARK: Probing and conflicts

    private mutating func restartProbing(now: NIODeadline, after delay: TimeAmount) {
        probingDeferred = true
        phase = .probing
        generation += 1
        pendingAnswers.removeAll()
        pendingProbeDefence.removeAll()
        dropTruncatedQueries()
        jobs.schedule(.probe(round: 0, generation: generation), at: now + delay)
    }

    private mutating func sendProbes() {
        for target in multicastTargets {
            let proposed = records(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6).filter(\.cacheFlush)
            // Multicast answers (QM): a unicast answer to port 5353 may reach another socket bound to it.
            let questions = [instanceName, hostName].map { DNSQuestion(name: $0, type: .any) }
            send(DNSMessage(isResponse: false, questions: questions, authorities: proposed), to: .multicast(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6))
        }
    }

    /// A response carries a record for one of our unique names with other data than ours.
    private func conflicts(in incoming: [DNSResourceRecord], source: MDNSSource) -> Bool {
        let ours = Set(records(interfaceIndex: source.interfaceIndex, ipv6: source.address.isIPv6).filter(\.cacheFlush).map(RecordIdentity.init))
        let allOurs = Set(multicastTargets.flatMap { records(interfaceIndex: $0.interfaceIndex, ipv6: $0.ipv6) }.map(RecordIdentity.init))
        for record in incoming where record.ttl > 0 && (record.name == instanceName || record.name == hostName) {
            let identity = RecordIdentity(record)
            if ours.contains(identity) || allOurs.contains(identity) { continue }  // our own, looped back
            // An address record for our host name from another interface of ours is not a conflict.
            if record.name == hostName, record.type == .a || record.type == .aaaa, isOurAddress(record.data) { continue }
            return true
        }
        return false
    }

    private func isOurAddress(_ data: DNSRecordData) -> Bool {
        let all = interfaces.flatMap(\.addresses)
        switch data {
        case .a(let value): return all.contains(.ipv4(value))
        case .aaaa(let bytes): return all.contains(.ipv6(bytes))
        default: return false
        }
    }

    /// RFC 6762 §8.2: a simultaneous probe for our name whose proposed data sorts after ours wins.
    private func lostProbeTieBreak(_ query: DNSMessage, source: MDNSSource) -> Bool {
        let theirs = query.authorities.filter { $0.name == instanceName || $0.name == hostName }
        guard !theirs.isEmpty else { return false }
        // Our own probe, heard on another interface of ours on the same link (its addresses are
        // that interface's): no rival.
        let allOurs = Set(multicastTargets.flatMap { records(interfaceIndex: $0.interfaceIndex, ipv6: $0.ipv6) }.map(RecordIdentity.init))
        if theirs.allSatisfy({ allOurs.contains(RecordIdentity($0)) }) { return false }
        let ours = records(interfaceIndex: source.interfaceIndex, ipv6: source.address.isIPv6)
            .filter { $0.cacheFlush && ($0.name == instanceName || $0.name == hostName) }
        let theirKeys = theirs.map(Self.sortKey).sorted { $0.lexicographicallyPrecedes($1) }
        let ourKeys = ours.map(Self.sortKey).sorted { $0.lexicographicallyPrecedes($1) }
        // Compared record by record, then by count (RFC 6762 §8.2.1).
        for (their, our) in zip(theirKeys, ourKeys) where their != our { return our.lexicographicallyPrecedes(their) }
        return theirKeys.count > ourKeys.count
    }

    private static func sortKey(_ record: DNSResourceRecord) -> [UInt8] {
        var bytes = withUnsafeBytes(of: record.recordClass.bigEndian, Array.init) + withUnsafeBytes(of: record.type.rawValue.bigEndian, Array.init)
        bytes += rdataKey(record.data)
        return bytes
    }

    private mutating func rename(now: NIODeadline) {
        let delay = naming.rename(now: now)
        events.append(.renamed(instanceName))
        restartProbing(now: now, after: delay)
    }

    // MARK: Answering

    private static func answers(_ question: DNSQuestion, with record: DNSResourceRecord) -> Bool {
        record.name == question.name && (question.type == .any || question.type == record.type)
    }

    /// RFC 6762 §7.2: a query with TC is held for 400-500 ms while its querier's further known
    /// answers come in packets without questions; then it is answered as one query. Only what
    /// concerns our records is kept. Legacy queriers (not port 5353) and probes are answered as usual.
    private mutating func answerOrHold(_ query: DNSMessage, from source: MDNSSource, now: NIODeadline) {
        guard source.port == MDNS.port, query.authorities.isEmpty, query.isTruncated || query.questions.isEmpty else {
            answer(query, from: source, now: now)
            return
        }
        let ours = records(interfaceIndex: source.interfaceIndex, ipv6: source.address.isIPv6)
        let identities = Set(ours.map(RecordIdentity.init))
        let known = query.answers.filter { identities.contains(RecordIdentity($0)) }
        guard !query.questions.isEmpty else {
            truncated.addKnownAnswers(known, from: source)
            return
        }
        let questions = query.questions.filter { question in ours.contains { Self.answers(question, with: $0) } }
        guard !questions.isEmpty else { return }
        let (id, evicted) = truncated.hold(questions: questions, knownAnswers: known, from: source)
        jobs.schedule(.decideTruncated(id: id, generation: generation), at: now + .milliseconds(Int64.random(in: 400...500, using: &random)))
        for held in evicted {
            jobs.removeAll { if case .decideTruncated(held.id, _) = $0 { true } else { false } }
            answer(held.merged, from: held.source, now: now)
        }
    }

    private mutating func dropTruncatedQueries() {
        truncated.removeAll()
        jobs.removeAll { if case .decideTruncated = $0 { true } else { false } }
    }

    /// `waited`: the query was held for its known answers (RFC 6762 §7.2), which stands in for
    /// the usual 20-120 ms delay of shared answers.
    private mutating func answer(_ query: DNSMessage, from source: MDNSSource, now: NIODeadline, waited: Bool = false) {
        let ipv6 = source.address.isIPv6
        let all = records(interfaceIndex: source.interfaceIndex, ipv6: ipv6)
        var answers: [DNSResourceRecord] = []
        var additionals: [DNSResourceRecord] = []
        var unicast = source.port != MDNS.port
        for question in query.questions {
            let matching = all.filter { Self.answers(question, with: $0) }
            guard !matching.isEmpty else { continue }
            if question.unicastResponse { unicast = true }
            answers += matching.filter { !answers.contains($0) }
            if question.type == .ptr && question.name == serviceType.serviceName || question.type == .srv || question.type == .any {
                // What a browser needs next (RFC 6763 §12): SRV, TXT and the addresses.
                additionals += all.filter { $0.name == instanceName || $0.name == hostName }
            }
        }
        // Known-answer suppression (RFC 6762 §7.1): the querier has it with at least half its TTL.
        let known = query.answers
        answers.removeAll { ours in known.contains { RecordIdentity($0) == RecordIdentity(ours) && $0.ttl >= ours.ttl / 2 } }
        guard !answers.isEmpty else { return }
        additionals.removeAll { extra in answers.contains(extra) || known.contains { RecordIdentity($0) == RecordIdentity(extra) && $0.ttl >= extra.ttl / 2 } }
        var seen = Set<RecordIdentity>()
        additionals = additionals.filter { seen.insert(RecordIdentity($0)).inserted }

        if source.port != MDNS.port || unicast, !unicastBudgets.spend(to: source.address, now: now) {
            // Refused: a legacy querier gets nothing (and asks again); a QU querier listens on
            // 5353, so it gets the multicast answer (RFC 6762 §5.4), under the multicast rate limit.
            guard source.port == MDNS.port else { return }
            unicast = false
        }
        if source.port != MDNS.port {
            // Legacy unicast (RFC 6762 §6.7): same ID, the questions repeated, TTL at most 10 s, no cache-flush bit.
            let legacy = { (record: DNSResourceRecord) -> DNSResourceRecord in
                var copy = record
                copy.ttl = min(copy.ttl, 10)
                copy.cacheFlush = false
                return copy
            }
            send(
                DNSMessage(id: query.id, isResponse: true, isAuthoritative: true, questions: query.questions, answers: answers.map(legacy), additionals: additionals.map(legacy)),
                to: .unicast(source))
            return
        }
        if unicast {
            send(DNSMessage(isResponse: true, isAuthoritative: true, answers: answers, additionals: additionals), to: .unicast(source))
            return
        }
        let key = PendingKey(interfaceIndex: source.interfaceIndex, ipv6: ipv6)
        if query.authorities.contains(where: { $0.name == instanceName || $0.name == hostName }) { pendingProbeDefence.insert(key) }
        let wasPending = pendingAnswers[key] != nil
        pendingAnswers[key, default: []] += (answers + additionals).filter { !(pendingAnswers[key]?.contains($0) ?? false) }
        guard !wasPending else { return }
        // Unique answers go at once; shared ones after 20-120 ms, so several responders' answers
        // spread (§6), unless the query already waited for its known answers.
        let atOnce = waited || answers.allSatisfy(\.cacheFlush)
        let delay = atOnce ? TimeAmount.zero : .milliseconds(Int64.random(in: 20...120, using: &random))
        jobs.schedule(.respond(interfaceIndex: source.interfaceIndex, ipv6: ipv6, generation: generation), at: now + delay)
        if atOnce { advance(now: now) }
    }

    /// Multicasts records on one interface, leaving out any sent there within the last second
    /// (RFC 6762 §6.2) unless `force` (announcements).
    private mutating func sendMulticast(
        _ records: [DNSResourceRecord], to target: PendingKey, now: NIODeadline, force: Bool, minimumInterval: TimeAmount = .seconds(1)
    ) {
        let fresh = records.filter { record in
            let key = RateKey(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6, name: record.name, type: record.type)
            guard force || (lastMulticast[key].map { now - $0 >= minimumInterval } ?? true) else { return false }
            return true
        }
        guard !fresh.isEmpty else { return }
        for record in fresh {
            lastMulticast[RateKey(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6, name: record.name, type: record.type)] = now
        }
        send(DNSMessage(isResponse: true, isAuthoritative: true, answers: fresh), to: .multicast(interfaceIndex: target.interfaceIndex, ipv6: target.ipv6))
    }

    private mutating func scheduleAnnouncements(now: NIODeadline) {
        generation += 1
        jobs.schedule(.announce(round: 0, generation: generation), at: now)
    }

    private mutating func send(_ message: DNSMessage, to destination: MDNSDestination) {
        packets.append(MDNSPacket(message: message, destination: destination))
    }
}

/// A record's name, type, class and data: what makes two records "the same" (TTL aside).
package struct RecordIdentity: Hashable {
    let name: DNSName
    let type: DNSRecordType
    let recordClass: UInt16
    let data: DNSRecordData

    init(_ record: DNSResourceRecord) {
        name = record.name
        type = record.type
        recordClass = record.recordClass
        data = record.data
    }
}

/// Bytes that order record data for the probe tie-break (RFC 6762 §8.2); names are compared
/// by their labels, uncompressed.
func rdataKey(_ data: DNSRecordData) -> [UInt8] {
    func name(_ value: DNSName) -> [UInt8] { value.labels.flatMap { [UInt8($0.count)] + $0.map { ($0 >= 0x41 && $0 <= 0x5A) ? $0 + 32 : $0 } } + [0] }
    func u16(_ value: UInt16) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xFF)] }
    switch data {
    case .a(let value): return withUnsafeBytes(of: value.bigEndian, Array.init)
    case .aaaa(let bytes): return bytes
    case .ptr(let target): return name(target)
    case .srv(let priority, let weight, let port, let target): return u16(priority) + u16(weight) + u16(port) + name(target)
    case .txt(let strings): return strings.flatMap { [UInt8(min($0.count, 255))] + $0 }
    case .nsec(let next, let types): return name(next) + types.map(\.rawValue).sorted().flatMap(u16)
    case .other(let bytes): return bytes
    }
}
