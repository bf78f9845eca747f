import MultipeerWire
import NIOCore
import Testing

@Suite("Peer ID, connection data and datagram header encodings (docs/PROTOCOL.md §8, §9)")
struct EncodingTests {
    private func connectionData(endpoints: Int = 1, fingerprint: Bool = true) throws -> ConnectionData {
        try ConnectionData(
            encryptionPreference: .required, token: Bytes16(high: 7, low: 8), forPeer: bob.identifier, peerID: alice,
            certificateFingerprint: fingerprint ? try SHA256Digest(bytes: [UInt8](repeating: 0xCD, count: 32)) : nil,
            endpoints: (0..<endpoints).map { _ in try WireEndpoint(address: .ipv6(Bytes16(high: .max, low: .max)), port: 9) })
    }

    private func bytes(of data: ConnectionData) -> [UInt8] {
        var out = ByteBuffer()
        data.encode(into: &out)
        return Array(out.readableBytesView)
    }

    private func decodeError(_ bytes: [UInt8]) -> WireError.Code? {
        do { _ = try ConnectionData.decode(buffer(bytes)); return nil } catch { return error.code }
    }

    @Test func peerIDDisplayNameLimits() throws {
        for length in [1, 62, 63] {
            let peer = try WirePeerID(identifier: .random(), displayName: String(repeating: "x", count: length))
            var out = ByteBuffer()
            peer.encode(into: &out)
            #expect(out.readableBytes == 18 + length)
            #expect(try WirePeerID.decode(exactly: out) == peer)
        }
        // 21 three-byte scalars are 63 bytes; 22 are 66.
        #expect(throws: Never.self) { try WirePeerID(identifier: .zero, displayName: String(repeating: "€", count: 21)) }
        #expect(throws: WireError.self) { try WirePeerID(identifier: .zero, displayName: String(repeating: "€", count: 22)) }
        // A display name of 64 bytes on the wire.
        let tooLong = [1] + [UInt8](repeating: 0, count: 16) + [64] + [UInt8](repeating: 0x61, count: 64)
        #expect(throws: WireError.self) { try WirePeerID.decode(exactly: buffer(tooLong)) }
        let empty = [1] + [UInt8](repeating: 0, count: 16) + [0]
        #expect(throws: WireError.self) { try WirePeerID.decode(exactly: buffer(empty)) }
        // Huge input is refused by its size before it is parsed.
        #expect(throws: WireError.self) { try WirePeerID.decode(exactly: ByteBuffer(repeating: 1, count: 1 << 20)) }
    }

    @Test func connectionDataRoundTripsAtItsLimits() throws {
        for count in [1, WireLimits.maxConnectionDataEndpoints] {
            for fingerprint in [false, true] {
                let data = try connectionData(endpoints: count, fingerprint: fingerprint)
                let encoded = bytes(of: data)
                #expect(encoded.count <= WireLimits.maxConnectionDataLength)
                #expect(try ConnectionData.decode(buffer(encoded)) == data)
            }
        }
        #expect(throws: WireError.self) { try connectionData(endpoints: 0) }
        #expect(throws: WireError.self) { try connectionData(endpoints: WireLimits.maxConnectionDataEndpoints + 1) }
    }

    @Test func connectionDataRejectsEveryTruncation() throws {
        let encoded = bytes(of: try connectionData(endpoints: 2))
        for length in 0..<encoded.count {
            #expect(decodeError(Array(encoded.prefix(length))) != nil, "prefix of \(length) bytes")
        }
        #expect(decodeError(encoded + [0]) == .trailingBytes)
        #expect(decodeError([UInt8](repeating: 0, count: WireLimits.maxConnectionDataLength + 1)) == .invalidLength)
    }

    @Test func connectionDataFieldRules() throws {
        let valid = bytes(of: try connectionData())
        var magic = valid
        magic[0] = 0
        #expect(decodeError(magic) == .badMagic)
        var version = valid
        version[4] = 2
        #expect(decodeError(version) == .unsupportedVersion)
        var preference = valid
        preference[5] = 3
        #expect(decodeError(preference) == .invalidValue)
        var flags = valid
        flags[6] = 0x03
        #expect(decodeError(flags) == .nonZeroReserved)
        var reserved = valid
        reserved[7] = 1
        #expect(decodeError(reserved) == .nonZeroReserved)
        // Identity flag without the fingerprint it promises.
        var noIdentity = valid
        noIdentity[6] = 0
        #expect(decodeError(noIdentity) == .invalidLength)
        // Endpoint with port 0 and an unknown family.
        let endpointStart = valid.count - WireEndpoint.maxEncodedLength
        var zeroPort = valid
        zeroPort[valid.count - 1] = 0
        zeroPort[valid.count - 2] = 0
        #expect(decodeError(zeroPort) == .invalidValue)
        var family = valid
        family[endpointStart] = 5
        #expect(decodeError(family) == .invalidValue)
    }

    @Test func datagramHeaderLengthRules() throws {
        let header = DatagramHeader(kind: .plain, receiverID: 1, epoch: 0, counter: .max)
        var out = ByteBuffer()
        header.encode(into: &out)
        #expect(try DatagramHeader.decode(datagram: out).header == header)

        func code(_ bytes: [UInt8]) -> WireError.Code? {
            do { _ = try DatagramHeader.decode(datagram: buffer(bytes)); return nil } catch { return error.code }
        }
        let sealedHeader = [1, 0, 0, 0] + [UInt8](repeating: 0, count: 16)
        #expect(code(sealedHeader) == .invalidLength)  // no room for the tag
        #expect(code(sealedHeader + [UInt8](repeating: 0, count: 15)) == .invalidLength)
        #expect(code(sealedHeader + [UInt8](repeating: 0, count: 16)) == nil)
        #expect(code(sealedHeader + [UInt8](repeating: 0, count: WireLimits.maxUDPPayload - 20)) == nil)
        #expect(code(sealedHeader + [UInt8](repeating: 0, count: WireLimits.maxUDPPayload - 19)) == .invalidLength)
        #expect(code([3] + Array(sealedHeader.dropFirst()) + [UInt8](repeating: 0, count: 16)) == .invalidValue)
        #expect(code([1, 0, 1, 0] + [UInt8](repeating: 0, count: 32)) == .nonZeroReserved)
        #expect(code([]) == .truncated)
        #expect(code([2]) == .invalidLength)
    }

    @Test func datagramNonceLayout() {
        let header = DatagramHeader(kind: .sealed, receiverID: 9, epoch: 0x0A0B_0C0D, counter: 0x0102_0304_0506_0708)
        #expect(header.nonce == [UInt8](repeating: 0, count: 12) + [0x0A, 0x0B, 0x0C, 0x0D, 1, 2, 3, 4, 5, 6, 7, 8])
    }

    /// The stack copy used as AEAD associated data is byte for byte the encoded header.
    @Test(arguments: [DatagramHeader.Kind.sealed, .plain])
    func datagramHeaderBytesOnTheStackMatchTheEncoding(kind: DatagramHeader.Kind) {
        for (receiverID, epoch, counter) in [(UInt32(9), UInt32(0x0A0B_0C0D), UInt64(0x0102_0304_0506_0708)), (.max, .max, .max), (1, 0, 0)] {
            let header = DatagramHeader(kind: kind, receiverID: receiverID, epoch: epoch, counter: counter)
            var encoded = ByteBuffer()
            header.encode(into: &encoded)
            #expect(header.withEncodedBytes { Array($0) } == Array(encoded.readableBytesView))
        }
    }

    @Test func bytes16OrdersAsABigEndianNumber() {
        #expect(Bytes16(high: 0, low: .max) < Bytes16(high: 1, low: 0))
        #expect(Bytes16(bytes: [0xFF] + [UInt8](repeating: 0, count: 15))! > Bytes16(bytes: [0x7F] + [UInt8](repeating: 0xFF, count: 15))!)
        let value = Bytes16.random()
        #expect(Bytes16(hex: value.description) == value)
        #expect(Bytes16(bytes: value.bytes) == value)
        #expect(Bytes16(hex: "zz") == nil)
        #expect(Bytes16(bytes: [1, 2, 3]) == nil)
    }
}
