import MultipeerDNS
import NIOCore

/// Queries with the TC bit, held while the querier's further known answers arrive (RFC 6762
/// §7.2). Everything a sender can make it hold is capped: queries per source and in all, and
/// known answers per query; past a cap the oldest goes. The responder keeps only questions and
/// known answers about its own records, so a held query is small whatever the packet carried.
package struct TruncatedQueries {
    package struct Held {
        let id: Int
        let source: MDNSSource
        var questions: [DNSQuestion]
        var knownAnswers: [DNSResourceRecord]

        /// The query as if it had come in one packet.
        var merged: DNSMessage { DNSMessage(isResponse: false, questions: questions, answers: knownAnswers) }
    }

    static let maxPerSource = 4
    static let maxTotal = 32
    static let maxKnownAnswersPerQuery = 32

    /// Oldest first.
    private(set) var held: [Held] = []
    private var nextID = 0

    var knownAnswerCount: Int { held.reduce(0) { $0 + $1.knownAnswers.count } }

    /// Holds a query; returns its id and the queries the caps pushed out, oldest first, for the
    /// caller to decide now with what they have (so a flood cannot silence answers to others).
    mutating func hold(questions: [DNSQuestion], knownAnswers: [DNSResourceRecord], from source: MDNSSource) -> (id: Int, evicted: [Held]) {
        var evicted: [Held] = []
        if let oldest = held.firstIndex(where: { $0.source == source }), held.count(where: { $0.source == source }) >= Self.maxPerSource {
            evicted.append(held.remove(at: oldest))
        }
        if held.count >= Self.maxTotal { evicted.append(held.removeFirst()) }
        nextID += 1
        var query = Held(id: nextID, source: source, questions: [], knownAnswers: [])
        var seen = Set<DNSQuestion>()
        query.questions = questions.filter { seen.insert($0).inserted }
        Self.add(knownAnswers, to: &query)
        held.append(query)
        return (nextID, evicted)
    }

    /// Known answers from a packet without questions: for every query held from its source.
    mutating func addKnownAnswers(_ records: [DNSResourceRecord], from source: MDNSSource) {
        guard !records.isEmpty else { return }
        for index in held.indices where held[index].source == source { Self.add(records, to: &held[index]) }
    }

    mutating func take(id: Int) -> Held? {
        guard let index = held.firstIndex(where: { $0.id == id }) else { return nil }
        return held.remove(at: index)
    }

    mutating func removeAll() { held.removeAll() }

    /// One entry per record, with the longest TTL heard; past the cap the oldest goes (which
    /// costs at most an answer the querier did not need).
    private static func add(_ records: [DNSResourceRecord], to query: inout Held) {
        for record in records {
            let identity = RecordIdentity(record)
            if let index = query.knownAnswers.firstIndex(where: { RecordIdentity($0) == identity }) {
                query.knownAnswers[index].ttl = max(query.knownAnswers[index].ttl, record.ttl)
            } else {
                query.knownAnswers.append(record)
                if query.knownAnswers.count > maxKnownAnswersPerQuery { query.knownAnswers.removeFirst() }
            }
        }
    }
}
