import MultipeerWire
import MultipeerProtocol

/// Answers the offer of a resource whose every byte and RESOURCE_COMPLETE had arrived when the
/// link went, so the sender never heard the verdict and offers it again on the resumed link
/// (docs/PROTOCOL.md §7.9): accepted at its end, so no chunk comes; RESOURCE_COMPLETE is answered
/// with the verdict the first transfer reached (waiting for it if it is still being verified):
/// RESOURCE_RECEIVED if that succeeded and the digest is the one verified, else RESOURCE_CANCEL.
/// Nothing reaches the application again, and no file is touched.
final class CompletedResourceEcho: InboundChannel {
    let channel: UInt32
    let digest: SHA256Digest
    private let transfer: ResourceTransfer
    private let linkage: any ChannelLinkage

    init(channel: UInt32, digest: SHA256Digest, verdictOf transfer: ResourceTransfer, linkage: any ChannelLinkage) {
        self.channel = channel
        self.digest = digest
        self.transfer = transfer
        self.linkage = linkage
    }

    func peerSent(_ frame: Frame) {
        guard case .resourceComplete(_, let sent) = frame else { return }
        let (channel, digest, transfer, linkage) = (channel, digest, transfer, linkage)
        Task {
            let answer: Frame = switch await transfer.result() {
            case .success where sent == digest: .resourceReceived(channel: channel)
            case .failure(let error) where error.code == .storageFailure: .resourceCancel(channel: channel, reason: .storageFailure)
            case .failure(let error) where error.code == .cancelled: .resourceCancel(channel: channel, reason: .cancelled)
            default: .resourceCancel(channel: channel, reason: .integrityFailure)
            }
            linkage.channelSend(answer)
        }
    }

    func failed(_ error: TransferError) {}
}
