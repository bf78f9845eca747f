import MultipeerConnectivity
import Testing

// This file imports only MultipeerConnectivity (and Testing), as an app's file does: every
// Foundation and Dispatch name below must come with it.

/// A message as apps send it: Codable, encoded with JSONEncoder.
private struct ChatMessage: Codable, Equatable {
    let text: String
    let sent: Date
}

/// A delegate as apps write it: an NSObject subclass.
private final class Chat: NSObject, MCSessionDelegate {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {}
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {}
}

@Suite("Importing only MultipeerConnectivity")
struct AppleImportTests {
    @Test func foundationAndDispatchComeWithTheModule() throws {
        let message = ChatMessage(text: "hi", sent: Date(timeIntervalSince1970: 1_700_000_000))
        let data: Data = try JSONEncoder().encode(message)
        #expect(try JSONDecoder().decode(ChatMessage.self, from: data) == message)
        let queue = DispatchQueue(label: "chat")
        let echoed = queue.sync { String(decoding: data, as: UTF8.self) }
        #expect(echoed.contains("hi"))
        let session = MCSession(peer: MCPeerID(displayName: "me"))
        let chat = Chat()
        session.delegate = chat
        #expect(session.delegate === chat)
        #expect(chat.isKind(of: NSObject.self))
    }
}

/// A session subclass, as apps write one.
private final class ChatSession: MCSession, @unchecked Sendable {
    let room = "lobby"
}

extension AppleImportTests {
    /// The whole case in one file that imports only MultipeerConnectivity: Apple's async
    /// form, a subclass of MCSession, and the plain `disconnect()` in async code.
    @Test func appleCodeCompilesInAsyncCode() async throws {
        let host = ChatSession(peer: MCPeerID(displayName: "host"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let guest = MCPeerID(displayName: "guest")
        let data: Data = try await host.nearbyConnectionData(forPeer: guest)
        #expect(!data.isEmpty && host.room == "lobby")
        host.disconnect()
    }
}
