import NIOCore

/// How many unicast answers (QU questions, legacy queriers) the responder sends: at most
/// `answersPerSecond` to each source address in a one-second window of its own, and at most
/// `totalPerSecond` in all within any one second.
///
/// The table holds at most `maxSources` addresses. A source is forgotten only once its window
/// has ended, when it is owed a fresh budget anyway: forgetting it can never reset a budget
/// mid-window. A new source that finds every place taken by a source still in its window is
/// refused until one ends. So each source gets at most `answersPerSecond` a window, and memory
/// stays at `maxSources` entries whatever the number of sources.
package struct UnicastAnswerBudgets {
    static let answersPerSecond = 20
    static let maxSources = 64
    /// A query sent to the group is on-link whatever its source (RFC 6762 §11), so a host on
    /// the link can aim unicast answers at any address, off-link ones too, and the table alone
    /// lets 64 windows of 20 be open at once. This keeps such reflection to 100 a second, well
    /// above what a link's real unicast queriers ask (QU questions as browsers start, the odd
    /// legacy resolver).
    static let totalPerSecond = 100

    private struct Entry {
        var windowStart: NIODeadline
        var sent: Int
    }

    private var entries: [MDNSAddress: Entry] = [:]
    /// When the most recent answers went, oldest first; at most `totalPerSecond` of them.
    private var recent: [NIODeadline] = []

    var trackedSourceCount: Int { entries.count }

    /// Whether one more unicast answer may go to `source` now; if so, it is counted.
    mutating func spend(to source: MDNSAddress, now: NIODeadline) -> Bool {
        recent.removeAll { now - $0 >= .seconds(1) }
        guard recent.count < Self.totalPerSecond else { return false }
        var entry = entries[source] ?? Entry(windowStart: now, sent: 0)
        if now - entry.windowStart >= .seconds(1) { entry = Entry(windowStart: now, sent: 0) }
        guard entry.sent < Self.answersPerSecond else { return false }
        if entries[source] == nil, entries.count >= Self.maxSources {
            // Only a source whose window has ended owes nothing and may go.
            guard let ended = entries.first(where: { now - $0.value.windowStart >= .seconds(1) })?.key else { return false }
            entries[ended] = nil
        }
        entry.sent += 1
        entries[source] = entry
        recent.append(now)
        return true
    }
}
