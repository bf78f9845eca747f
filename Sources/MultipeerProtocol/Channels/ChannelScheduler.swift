import NIOCore
import MultipeerWire

/// Our channels on one connection, sans-I/O: their numbers, the windows the peer gave us
/// (docs/PROTOCOL.md §7.6), and whose turn it is to send. Channels with something to send take
/// turns one frame each, so a busy channel cannot starve the others; the shell sends messages
/// before asking for the next turn.
package struct ChannelScheduler {
    private struct Entry {
        var window = WireLimits.initialChannelWindow
        /// The source has something to send (data, or its closing frame).
        var ready = false
        /// The source has data but no window is left: not served until a window update.
        var blocked = false
        var queued = false
    }

    private var nextNumber: UInt32
    private var entries: [UInt32: Entry] = [:]
    /// Ready channels in turn order; entries may be stale (checked when popped).
    private var turns = CircularBuffer<UInt32>()
    private(set) var connectionWindow = WireLimits.initialConnectionWindow

    package init(weAreDialer: Bool) {
        nextNumber = weAreDialer ? 1 : 2
    }

    var openCount: Int { entries.count }
    func isOpen(_ channel: UInt32) -> Bool { entries[channel] != nil }
    func window(of channel: UInt32) -> UInt32? { entries[channel]?.window }

    /// A number for a new channel, or nil when 64 of ours are open or the numbers ran out.
    package mutating func open() -> UInt32? {
        guard entries.count < WireLimits.maxChannelsOpenedPerSide, nextNumber <= UInt32.max - 2 else { return nil }
        let channel = nextNumber
        nextNumber += 2
        entries[channel] = Entry()
        return channel
    }

    /// The channel ended (closed, reset, cancelled or its resource answered).
    package mutating func ended(_ channel: UInt32) {
        entries[channel] = nil
    }

    /// The channel's source has something to send.
    package mutating func markReady(_ channel: UInt32) {
        guard var entry = entries[channel] else { return }
        entry.ready = true
        enqueueIfServable(channel, &entry)
        entries[channel] = entry
    }

    package mutating func windowUpdate(_ channel: UInt32, increment: UInt32) {
        guard var entry = entries[channel] else { return }
        entry.window = UInt32(min(UInt64(entry.window) + UInt64(increment), UInt64(WireLimits.maxWindow)))
        entry.blocked = false
        enqueueIfServable(channel, &entry)
        entries[channel] = entry
    }

    /// Something other than a window held the channel back (what may go unacknowledged, §7.10)
    /// and has let go: it is served again.
    package mutating func unblock(_ channel: UInt32) {
        guard var entry = entries[channel], entry.blocked else { return }
        entry.blocked = false
        enqueueIfServable(channel, &entry)
        entries[channel] = entry
    }

    package mutating func connectionWindowUpdate(increment: UInt32) {
        connectionWindow = UInt32(min(UInt64(connectionWindow) + UInt64(increment), UInt64(WireLimits.maxWindow)))
        for channel in entries.keys where entries[channel]!.blocked && entries[channel]!.window > 0 {
            var entry = entries[channel]!
            entry.blocked = false
            enqueueIfServable(channel, &entry)
            entries[channel] = entry
        }
    }

    /// The next channel to serve and how many data bytes it may send now (possibly 0: enough
    /// for a closing frame). Nil when no channel can send.
    package mutating func next() -> (channel: UInt32, allowance: Int)? {
        while let channel = turns.popFirst() {
            guard var entry = entries[channel] else { continue }
            entry.queued = false
            entries[channel] = entry
            guard entry.ready, !entry.blocked else { continue }
            let allowance = min(Int(entry.window), Int(connectionWindow), Frame.largestSentPayload)
            return (channel, allowance)
        }
        return nil
    }

    /// What the source did with its turn.
    package enum Served {
        /// Sent this many data bytes (1 or more) and may have more.
        case data(Int)
        /// Sent its closing frame, or has nothing until it says so again.
        case idle
        /// Has data but the allowance was 0.
        case blocked
    }

    package mutating func served(_ channel: UInt32, _ served: Served) {
        guard var entry = entries[channel] else { return }
        switch served {
        case .data(let bytes):
            precondition(bytes <= Int(entry.window) && bytes <= Int(connectionWindow), "sent beyond the window")
            entry.window -= UInt32(bytes)
            connectionWindow -= UInt32(bytes)
        case .idle:
            entry.ready = false
        case .blocked:
            entry.blocked = true
        }
        enqueueIfServable(channel, &entry)
        entries[channel] = entry
    }

    private mutating func enqueueIfServable(_ channel: UInt32, _ entry: inout Entry) {
        guard entry.ready, !entry.blocked, !entry.queued else { return }
        entry.queued = true
        turns.append(channel)
    }
}
