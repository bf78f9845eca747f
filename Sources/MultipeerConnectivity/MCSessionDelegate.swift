import Foundation
import MultipeerProtocol

/// Apple's session delegate. Calls arrive on the session's private serial queue, in order.
public protocol MCSessionDelegate: AnyObject {
    /// Each peer goes connecting, then connected or notConnected; every change is reported once.
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState)
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID)
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID)
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress)
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?)
    /// Asked after the TLS handshake and before the peer can become connected. `certificate` is
    /// Apple's array of `SecCertificate`, leaf first, or nil when the peer has no identity. Call the
    /// handler once with your decision; no answer within the session's timeout counts as a rejection.
    /// Optional, as in Apple's protocol: the default implementation accepts every peer.
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void)
}

extension MCSessionDelegate {
    /// Apple's behaviour when the delegate does not implement the method: accept.
    public func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        certificateHandler(true)
    }
}
