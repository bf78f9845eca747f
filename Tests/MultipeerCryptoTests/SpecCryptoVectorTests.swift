import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

/// The cryptographic vectors of docs/PROTOCOL.md §11, made by docs/vectors/make_vectors.py from
/// the spec's text (with libsodium through PyNaCl and Python's hashlib), not from this code.
@Suite("Spec test vectors: sealing and the pairing code")
struct SpecCryptoVectorTests {
    let vectors: [String: [UInt8]]
    init() throws { vectors = try SpecVectorFile.load() }

    @Test func aSealedDatagramIsByteForByteTheSpecsAndOpens() throws {
        let expected = try #require(vectors["datagram-sealed-hello"])
        let header = DatagramHeader(kind: .sealed, receiverID: 0x0102_0304, epoch: 2, counter: 5)
        let key = SecureBytes(copying: Array(UInt8(0xA0)..<0xC0))
        // `seal` makes the whole datagram, header included.
        let sealed = DatagramCipher.seal(ByteBuffer(string: "hello"), header: header, key: key)
        #expect(Array(sealed.readableBytesView) == expected)

        let opened = DatagramCipher.open(ByteBuffer(bytes: expected.dropFirst(WireLimits.datagramHeaderLength)), header: header, key: key)
        #expect(opened.map { String(buffer: $0) } == "hello")
        var tampered = expected
        tampered[tampered.count - 1] ^= 1
        #expect(DatagramCipher.open(ByteBuffer(bytes: tampered.dropFirst(WireLimits.datagramHeaderLength)), header: header, key: key) == nil)
    }

    @Test func thePairingCodeIsTheSpecs() throws {
        let digest = try #require(vectors["pairing-code-digest"])
        let nonce = Array(UInt8(0)..<32)
        let code = PairingCode.make(
            exporter: Array(0x80..<0xA0), dialer: Array(0..<16), listener: Array(0xF0...0xFF),
            commitment: PairingCode.commitment(to: nonce), dialerNonce: nonce, listenerNonce: Array(0x20..<0x40))
        let value = digest.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000
        let digits = String(format: "%06llu", value)
        #expect(code == digits.prefix(3) + " " + digits.suffix(3))
        // The commitment is the one frame-pairing-commit carries.
        let commitFrame = try #require(vectors["frame-pairing-commit"])
        #expect(Array(commitFrame.suffix(32)) == PairingCode.commitment(to: nonce))
    }
}
