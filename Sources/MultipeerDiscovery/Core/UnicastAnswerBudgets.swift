import NIOCore

/// How many unicast answers (QU questions, legacy queriers) the responder sends each source
/// address: `answersPerSecond` in a one-second window per source, so that a spoofed query stream
/// cannot aim it at a victim, and no source can spend another's answers.
///
/// The table holds at most `maxSources` addresses. A new one, when it is full, takes the place
/// of the stalest (least recently heard) source that has not spent its budget in its current
/// second; forgetting such a source costs it nothing it is owed. A source that has spent its
/// budget keeps its place until its second is over, so evicting it cannot hand it a fresh budget.
/// A source finds no place only while every tracked one has spent its whole budget within the
/// last second (`maxSources * answersPerSecond` answers, a flood); it is then refused, as an
/// over-budget source is, until a second ends. Memory stays at `maxSources` entries whatever
/// the number of sources.
struct UnicastAnswerBudgets {
    static let answersPerSecond = 20
    static let maxSources = 64

    private struct Entry {
        var windowStart: NIODeadline
        var sent: Int
        var lastHeard: NIODeadline

        func isSpent(now: NIODeadline) -> Bool { now - windowStart < .seconds(1) && sent >= UnicastAnswerBudgets.answersPerSecond }
    }

    private var entries: [MDNSAddress: Entry] = [:]

    var trackedSourceCount: Int { entries.count }

    /// Whether one more unicast answer may go to `source` now; if so, it is counted.
    mutating func spend(to source: MDNSAddress, now: NIODeadline) -> Bool {
        if var entry = entries[source] {
            if now - entry.windowStart >= .seconds(1) { (entry.windowStart, entry.sent) = (now, 0) }
            entry.lastHeard = now
            let allowed = entry.sent < Self.answersPerSecond
            if allowed { entry.sent += 1 }
            entries[source] = entry
            return allowed
        }
        if entries.count >= Self.maxSources {
            guard let stalest = entries.filter({ !$0.value.isSpent(now: now) }).min(by: { $0.value.lastHeard < $1.value.lastHeard })?.key
            else { return false }
            entries[stalest] = nil
        }
        entries[source] = Entry(windowStart: now, sent: 1, lastHeard: now)
        return true
    }
}
