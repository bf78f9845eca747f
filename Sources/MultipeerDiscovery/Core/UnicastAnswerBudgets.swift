import NIOCore

/// How many unicast answers (QU questions, legacy queriers) the responder sends: at most
/// `answersPerSecond` to each source address in a one-second window of its own.
///
/// The table holds at most `maxSources` addresses. A source is forgotten only once its window
/// has ended, when it is owed a fresh budget anyway: forgetting it can never reset a budget
/// mid-window. A new source that finds every place taken by a source still in its window is
/// refused until one ends. So each source gets at most `answersPerSecond` a window, and memory
/// stays at `maxSources` entries whatever the number of sources.
struct UnicastAnswerBudgets {
    static let answersPerSecond = 20
    static let maxSources = 64

    private struct Entry {
        var windowStart: NIODeadline
        var sent: Int
    }

    private var entries: [MDNSAddress: Entry] = [:]

    var trackedSourceCount: Int { entries.count }

    /// Whether one more unicast answer may go to `source` now; if so, it is counted.
    mutating func spend(to source: MDNSAddress, now: NIODeadline) -> Bool {
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
        return true
    }
}
