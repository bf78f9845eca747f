// The project's main job. Until the session layer lands (issue: MCSession over real sockets)
// this is a self-check of what exists: the crypto libraries load, peer IDs survive archiving,
// negotiation picks TLS, and a HELLO goes through the wire codec byte by byte and comes back equal.
import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerWire
import NIOCore

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("multipeer-demo: \(message)\n".utf8))
    exit(1)
}

func hex(_ buffer: ByteBuffer) -> String {
    buffer.readableBytesView.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
}

do {
    try CryptoRuntime.ensureInitialized()
    print("crypto:      \(CryptoRuntime.openSSLVersion), libsodium \(CryptoRuntime.sodiumVersion)")

    let alice = MCPeerID(displayName: "alice")
    let bob = MCPeerID(displayName: "bob")
    let archive = try NSKeyedArchiver.archivedData(withRootObject: alice, requiringSecureCoding: true)
    guard try NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: archive) == alice else {
        fail("archived peer ID did not come back equal")
    }
    print("peers:       \(alice.displayName), \(bob.displayName) (archive of alice round-trips, \(archive.count) bytes)")

    let dialer = try Preamble(encryptionPreference: .required, hasIdentity: true)
    let listener = try Preamble(encryptionPreference: .optional, hasIdentity: false)
    let outcome = Negotiation.outcome(dialer: dialer, listener: listener)
    guard outcome == .tls(version: WireLimits.protocolVersion) else { fail("negotiation gave \(outcome)") }
    print("negotiation: required+identity with optional -> \(outcome)")

    let hello = Frame.hello(try Hello(
        purpose: .connectionData,
        preambleEcho: Hello.echo(dialer: dialer, listener: listener),
        token: Bytes16.random(),
        listenPort: 50_001,
        datagramPort: 50_002,
        datagramReceiverID: UInt32.random(in: 1 ... .max),
        peerID: try WirePeerID.decode(exactly: ByteBuffer(bytes: alice.wireRepresentation))))
    var bytes = ByteBuffer()
    try hello.encode(into: &bytes)
    print("HELLO:       \(bytes.readableBytes) bytes: \(hex(bytes))")

    var decoder = FrameDecoder()
    var decoded: [Frame] = []
    for byte in bytes.readableBytesView {
        decoder.append(ByteBuffer(bytes: [byte]))
        while let frame = try decoder.nextFrame() { decoded.append(frame) }
    }
    guard decoded == [hello], case .hello(let back)? = decoded.first else { fail("decoded frame differs") }
    print("decoded:     HELLO from \(back.peerID.displayName) (\(back.peerID.identifier)), purpose \(back.purpose), "
        + "listen port \(back.listenPort), fed one byte at a time")
    print("self-check passed")
} catch {
    fail("\(error)")
}
