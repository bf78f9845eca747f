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

        // The session's path, with the epoch's subkey derived once, makes the same bytes.
        let epochKey = DatagramEpochKey(key: key, epoch: 2)
        #expect(Array(epochKey.seal(ByteBuffer(string: "hello"), header: header).readableBytesView) == expected)
        #expect(epochKey.open(ByteBuffer(bytes: expected.dropFirst(WireLimits.datagramHeaderLength)), header: header).map { String(buffer: $0) } == "hello")
        #expect(epochKey.open(ByteBuffer(bytes: tampered.dropFirst(WireLimits.datagramHeaderLength)), header: header) == nil)
        // A key is for its epoch only.
        #expect(DatagramEpochKey(key: key, epoch: 3).open(ByteBuffer(bytes: expected.dropFirst(WireLimits.datagramHeaderLength)), header: header) == nil)
    }

    /// Subkey once per epoch and XChaCha20-Poly1305 per datagram agree over epochs, counters
    /// (the whole range, both halves of the nonce's counter) and sizes, both ways.
    @Test(arguments: [UInt32(0), 1, 0x0102_0304, .max])
    func theEpochKeyPathIsXChaChaByteForByte(epoch: UInt32) throws {
        let key = SecureBytes(randomCount: DatagramCipher.keyLength)
        let epochKey = DatagramEpochKey(key: key, epoch: epoch)
        for (counter, size) in [(UInt64(0), 0), (1, 1), (0xFFFF_FFFF, 1_200), (0x1_0000_0000, 63), (0x0123_4567_89AB_CDEF, 65_471), (.max, 16)] {
            let header = DatagramHeader(kind: .sealed, receiverID: 7, epoch: epoch, counter: counter)
            let message = ByteBuffer(bytes: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            let reference = DatagramCipher.seal(message, header: header, key: key)
            #expect(epochKey.seal(message, header: header) == reference, "counter \(counter), \(size) bytes")
            let body = reference.getSlice(at: WireLimits.datagramHeaderLength, length: reference.readableBytes - WireLimits.datagramHeaderLength)!
            #expect(epochKey.open(body, header: header) == message)
            #expect(DatagramCipher.open(epochKey.seal(message, header: header).getSlice(
                at: WireLimits.datagramHeaderLength, length: body.readableBytes)!, header: header, key: key) == message)
        }
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

    /// §7.9: each side's resumption proof, and that a proof checks only for its own role and binding.
    @Test func theResumptionProofsAreTheSpecs() throws {
        let keys = ResumptionKeys(id: Array(0x60..<0x70), key: SecureBytes(copying: Array(UInt8(0xC0)..<0xE0)))
        let binding = SecureBytes(copying: Array(UInt8(0x40)..<0x60))
        for (role, name) in [(ResumptionKeys.Role.dialer, "resumption-proof-dialer"), (.listener, "resumption-proof-listener")] {
            let expected = try #require(vectors[name])
            #expect(try keys.proof(by: role, binding: binding).withUnsafeBytes { Array($0) } == expected)
            #expect(keys.verify(expected, by: role, binding: binding))
        }
        let dialerProof = try #require(vectors["resumption-proof-dialer"])
        #expect(!keys.verify(dialerProof, by: .listener, binding: binding))
        #expect(!keys.verify(dialerProof, by: .dialer, binding: SecureBytes(copying: Array(UInt8(0x41)..<0x61))))
        #expect(!keys.verify(Array(dialerProof.dropLast()), by: .dialer, binding: binding))
        // RESUME carries the dialer's proof.
        let resume = try #require(vectors["frame-resume"])
        #expect(Array(resume.dropFirst(WireLimits.frameHeaderLength).prefix(32)) == dialerProof)
    }
}
