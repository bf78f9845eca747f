/// Sliding anti-replay window over datagram counters (RFC 6479 style, as in WireGuard): the
/// highest counter seen and a bitmap of the `size` counters below it. Check with `accepts`,
/// and `commit` only after the datagram authenticated, so a forgery changes nothing.
/// Every counter from 0 to `UInt64.max` is handled without overflow: counters come off the wire.
public struct ReplayWindow: Sendable {
    public static let defaultSize = 8_192

    public let size: Int
    private var bits: [UInt64]
    /// The highest committed counter; nil when nothing was committed.
    private var highest: UInt64?

    public init(size: Int = ReplayWindow.defaultSize) {
        precondition(size >= 64 && size % 64 == 0, "window size must be a positive multiple of 64")
        self.size = size
        bits = [UInt64](repeating: 0, count: size / 64)
    }

    /// Whether `counter` is new and not too old. Changes nothing.
    public func accepts(_ counter: UInt64) -> Bool {
        guard let highest, counter <= highest else { return true }
        if highest - counter >= UInt64(size) { return false }
        return !isSet(counter)
    }

    /// Records `counter` as seen. Call only for a datagram that `accepts` and that authenticated.
    public mutating func commit(_ counter: UInt64) {
        guard accepts(counter) else { return }
        if let highest {
            if counter > highest {
                let advance = counter - highest  // > 0, and cannot overflow since counter > highest
                if advance >= UInt64(size) {
                    for index in bits.indices { bits[index] = 0 }
                } else {
                    // Clear the slots the window slides over: highest + 1 ... counter.
                    for step in 1...advance { clear(highest + step) }
                }
                self.highest = counter
            }
        } else {
            highest = counter
        }
        set(counter)
    }

    private func position(_ counter: UInt64) -> (word: Int, bit: UInt64) {
        let slot = Int(counter % UInt64(size))
        return (slot / 64, UInt64(1) << UInt64(slot % 64))
    }

    private func isSet(_ counter: UInt64) -> Bool {
        let (word, bit) = position(counter)
        return bits[word] & bit != 0
    }

    private mutating func set(_ counter: UInt64) {
        let (word, bit) = position(counter)
        bits[word] |= bit
    }

    private mutating func clear(_ counter: UInt64) {
        let (word, bit) = position(counter)
        bits[word] &= ~bit
    }
}
