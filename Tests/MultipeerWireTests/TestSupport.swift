import Foundation
import MultipeerWire
import NIOCore

func buffer(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

func buffer(_ string: String) -> ByteBuffer { ByteBuffer(string: string) }

func hexBytes(_ text: String) -> [UInt8] {
    let digits = text.filter { $0.isHexDigit }
    precondition(digits.count % 2 == 0, "odd number of hex digits")
    var bytes: [UInt8] = []
    var index = digits.startIndex
    while index < digits.endIndex {
        let next = digits.index(index, offsetBy: 2)
        bytes.append(UInt8(digits[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

func encoded(_ frame: Frame) throws -> [UInt8] {
    var out = ByteBuffer()
    try frame.encode(into: &out)
    return Array(out.readableBytesView)
}

/// A raw frame header with any field values, for feeding the decoder what no encoder would write.
func rawHeader(type: UInt8, flags: UInt8 = 0, reserved: UInt16 = 0, channel: UInt32 = 0, length: UInt32) -> [UInt8] {
    var out = ByteBuffer()
    out.writeInteger(type)
    out.writeInteger(flags)
    out.writeInteger(reserved)
    out.writeInteger(channel)
    out.writeInteger(length)
    return Array(out.readableBytesView)
}

/// Decodes every frame in `bytes`, feeding the decoder in pieces of the given sizes (cycled).
func decodeAll(_ bytes: [UInt8], pieceSizes: [Int]) throws(WireError) -> [Frame] {
    var decoder = FrameDecoder()
    var frames: [Frame] = []
    var offset = 0
    var piece = 0
    while offset < bytes.count {
        let size = max(1, pieceSizes[piece % pieceSizes.count])
        let end = min(bytes.count, offset + size)
        decoder.append(buffer(Array(bytes[offset..<end])))
        offset = end
        piece += 1
        while let frame = try decoder.nextFrame() { frames.append(frame) }
    }
    return frames
}

/// The repository root, found from this file's path (tests read docs/ and Fuzz/).
let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

let alice = try! WirePeerID(identifier: Bytes16(bytes: Array(0..<16))!, displayName: "alice")
let bob = try! WirePeerID(identifier: Bytes16(bytes: Array(0xF0...0xFF))!, displayName: "bob")
