import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import Synchronization

/// Standard output, one line per write, so that lines from the command loop, the event loop and
/// transfers never interleave and a reader sees each line as soon as it is printed.
final class LineWriter: Sendable {
    /// Whether the last line (BYE) went out: anything after it is dropped.
    private let finished = Mutex(false)

    func line(_ text: String) {
        finished.withLock { finished in
            guard !finished else { return }
            write(text)
        }
    }

    /// Prints `text` as the last line.
    func finish(_ text: String) {
        finished.withLock { finished in
            guard !finished else { return }
            finished = true
            write(text)
        }
    }

    private func write(_ text: String) {
        // A reader that went away is not our problem (SIGPIPE is ignored): the next QUIT or end of
        // input ends the process.
        try? FileHandle.standardOutput.write(contentsOf: Data((text + "\n").utf8))
    }
}

/// How values appear in lines (Interop/HARNESS.md, "Output").
enum Format {
    static func hex<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func peer(_ peer: MCPeerID) -> String { hex(peer.wireRepresentation) }

    /// RFC 3986 percent-encoding that keeps only the unreserved characters, so a name is one field.
    static func name(_ name: String) -> String {
        var text = ""
        for byte in name.utf8 {
            if isUnreserved(byte) {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "%" + hex([byte]).uppercased()
            }
        }
        return text
    }

    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default: false
        }
    }

    /// The one-word reason of an error: the MCError code name, or "unknown".
    static func reason(_ error: any Error) -> String {
        (error as? MCError).map { "\($0.code)" } ?? "unknown"
    }

    /// Why a stream or resource failed: the transfer's own reason when the library has one
    /// (`integrityFailure`, `cancelledByPeer`, ...), else the MCError code name.
    static func transferReason(_ error: any Error) -> String {
        if let transfer = (error as? MCError)?.transfer { return "\(transfer.code)" }
        return reason(error)
    }

    /// The SHA-256 fingerprint of the leaf, or "-" when the peer has no certificate.
    static func fingerprint(_ certificates: [SecCertificate]?) -> String {
        certificates?.first.map { hex($0.certificate.sha256Fingerprint) } ?? "-"
    }
}

/// Length and SHA-256 of content that arrives in pieces.
struct Digest {
    private let hasher = SHA256Hasher()
    private(set) var length = 0

    mutating func update(_ data: Data) {
        data.withUnsafeBytes { hasher.update($0) }
        length += data.count
    }

    /// "<length> <sha256>"; the digest cannot be fed afterwards.
    func finish() -> String { "\(length) \(Format.hex(hasher.finalize()))" }

    static func of(_ data: Data) -> String {
        var digest = Digest()
        digest.update(data)
        return digest.finish()
    }

    /// Of a file, read in pieces so that large resources are not held in memory.
    static func of(file path: String) throws -> String {
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        var digest = Digest()
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { digest.update(chunk) }
        return digest.finish()
    }
}
