import MultipeerWire
import NIOCore

/// What one of our channels offers the scheduler on its turn.
package enum ChannelOutput {
    /// At most the allowance, at least one byte.
    case data(ByteBuffer)
    /// The channel's last frame (STREAM_CLOSE, RESOURCE_COMPLETE); it needs no window.
    case finish(Frame)
    /// Nothing now; the source marks itself ready again when it has something.
    case idle
    /// Data waits but the allowance was 0.
    case blocked
}

/// A channel we opened, as the engine drives it on its event loop.
package protocol OutboundChannel: AnyObject, Sendable {
    /// RESOURCE_CHUNK rather than STREAM_DATA.
    var carriesResource: Bool { get }
    /// On the loop, before the opening frame: false when it was cancelled meanwhile (then
    /// nothing is sent).
    func bind(channel: UInt32, linkage: any ChannelLinkage) -> Bool
    /// The frame that opens the channel (STREAM_OPEN, RESOURCE_OFFER); `linkRecovery`: the
    /// connection has it (docs/PROTOCOL.md §7.9), so an offer names its send.
    func openingFrame(channel: UInt32, linkRecovery: Bool) -> Frame
    /// On the loop, on the channel's turn.
    func nextOutput(allowance: Int) -> ChannelOutput
    /// A frame the peer sent for this channel (not WINDOW_UPDATE, which the scheduler applies).
    /// Whether it ended the channel is the `ChannelMux`'s to say, not the endpoint's.
    func peerSent(_ frame: Frame)
    /// The connection ended, or the channel could not be opened.
    func failed(_ error: TransferError)
}

/// A channel the peer opened and we took, as the engine drives it on its event loop.
package protocol InboundChannel: AnyObject, Sendable {
    /// A frame the peer sent for this channel.
    func peerSent(_ frame: Frame)
    func failed(_ error: TransferError)
}

/// What a channel object asks of the engine, from any thread.
package protocol ChannelLinkage: AnyObject, Sendable {
    /// The outbound channel has something to send.
    func channelReady(_ channel: UInt32)
    /// The application took `bytes` of an inbound channel: give window back.
    func channelTaken(_ bytes: Int, on channel: UInt32)
    /// Sends a frame of ours for the channel (a reset, a cancel, an answer), if the channel is
    /// still open; the `ChannelMux` ends the channel when the frame ends it.
    func channelSend(_ frame: Frame)
}
