import MultipeerWire

/// Gives the peer's windows back as the application takes its bytes (docs/PROTOCOL.md §7.6):
/// a WINDOW_UPDATE once a quarter of the window has been taken, per channel and for the
/// connection, so a reader that stops reading stops the writer. Sans-I/O.
package struct WindowReturns {
    let channelThreshold: UInt32
    let connectionThreshold: UInt32

    package init(channelWindow: UInt32 = WireLimits.initialChannelWindow, connectionWindow: UInt32 = WireLimits.initialConnectionWindow) {
        channelThreshold = max(1, channelWindow / 4)
        // Small and fixed, so the connection window comes back however the channels are sized.
        connectionThreshold = min(65_536, max(1, connectionWindow / 4))
    }

    private var pendingByChannel: [UInt32: UInt32] = [:]
    private var pendingConnection: UInt32 = 0

    /// `bytes` of `channel` were taken (or dropped); the updates to send now. A channel that is
    /// no longer open gives back only the connection's share.
    package mutating func taken(_ bytes: Int, on channel: UInt32, channelOpen: Bool) -> [Frame] {
        guard bytes > 0 else { return [] }
        let count = UInt32(clamping: bytes)
        var frames: [Frame] = []
        if channelOpen {
            let pending = pendingByChannel[channel, default: 0] + count
            if pending >= channelThreshold {
                frames.append(.windowUpdate(channel: channel, increment: pending))
                pendingByChannel[channel] = nil
            } else {
                pendingByChannel[channel] = pending
            }
        }
        pendingConnection += count
        if pendingConnection >= connectionThreshold {
            frames.append(.windowUpdate(channel: 0, increment: pendingConnection))
            pendingConnection = 0
        }
        return frames
    }

    package mutating func forget(_ channel: UInt32) {
        pendingByChannel[channel] = nil
    }
}
