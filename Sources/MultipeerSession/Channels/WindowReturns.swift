import MultipeerWire

/// Gives the peer's windows back as the application takes its bytes (docs/PROTOCOL.md §7.6):
/// a WINDOW_UPDATE once a quarter of the initial window has been taken, per channel and for the
/// connection, so a reader that stops reading stops the writer. Sans-I/O.
struct WindowReturns {
    static let channelThreshold = WireLimits.initialChannelWindow / 4
    static let connectionThreshold = WireLimits.initialChannelWindow / 4

    private var pendingByChannel: [UInt32: UInt32] = [:]
    private var pendingConnection: UInt32 = 0

    /// `bytes` of `channel` were taken (or dropped); the updates to send now. A channel that is
    /// no longer open gives back only the connection's share.
    mutating func taken(_ bytes: Int, on channel: UInt32, channelOpen: Bool) -> [Frame] {
        guard bytes > 0 else { return [] }
        let count = UInt32(clamping: bytes)
        var frames: [Frame] = []
        if channelOpen {
            let pending = pendingByChannel[channel, default: 0] + count
            if pending >= Self.channelThreshold {
                frames.append(.windowUpdate(channel: channel, increment: pending))
                pendingByChannel[channel] = nil
            } else {
                pendingByChannel[channel] = pending
            }
        }
        pendingConnection += count
        if pendingConnection >= Self.connectionThreshold {
            frames.append(.windowUpdate(channel: 0, increment: pendingConnection))
            pendingConnection = 0
        }
        return frames
    }

    mutating func forget(_ channel: UInt32) {
        pendingByChannel[channel] = nil
    }
}
