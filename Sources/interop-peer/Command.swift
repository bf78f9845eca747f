import Foundation
import MultipeerConnectivity
import MultipeerWire

/// One line of standard input (Interop/HARNESS.md, "Input").
enum Command {
    enum Payload {
        case bytes(Data)
        /// `@PATH`: the file's bytes, read when the command runs.
        case file(String)
    }

    case makeData(MCPeerID)
    case connect(MCPeerID, Data)
    case send(MCSessionSendDataMode, MCPeerID, Payload)
    case stream(MCPeerID, name: String, path: String)
    case resource(MCPeerID, name: String, path: String)
    case cancel(MCPeerID)
    case cancelStream(MCPeerID, name: String)
    case peers
    case advertise(service: String)
    case stopAdvertising
    case browse(service: String)
    case stopBrowsing
    case invite(MCPeerID, timeout: TimeInterval, context: Data)
    case answer(Int, accept: Bool)
    case disconnect
    case quit

    /// A line that is no command; answered `ERROR <word> usage`.
    struct Malformed: Error {
        /// The line's first field, percent-encoded so that the answer stays one line of fields.
        let word: String
    }

    /// Parses one line; nil for a blank line.
    static func parse(_ line: String) throws(Malformed) -> Command? {
        let fields = line.split(separator: " ").map(String.init)
        guard let word = fields.first else { return nil }
        let arguments = Array(fields.dropFirst())
        let malformed = Malformed(word: Format.name(word))
        // Each case checks its field count first, so a short line never reaches a missing index.
        func expect(_ count: Int) throws(Malformed) {
            guard arguments.count == count else { throw malformed }
        }
        func peer(_ field: String) throws(Malformed) -> MCPeerID {
            guard let bytes = hex(field), let peer = try? MCPeerID(wireRepresentation: bytes) else { throw malformed }
            return peer
        }
        func name(_ field: String) throws(Malformed) -> String {
            guard let name = percentDecoded(field) else { throw malformed }
            return name
        }
        switch word {
        case "MAKE-DATA":
            try expect(1)
            return .makeData(try peer(arguments[0]))
        case "CONNECT":
            try expect(2)
            guard let data = hex(arguments[1]) else { throw malformed }
            return .connect(try peer(arguments[0]), data)
        case "SEND":
            try expect(3)
            let mode: MCSessionSendDataMode
            switch arguments[0] {
            case "reliable": mode = .reliable
            case "unreliable": mode = .unreliable
            default: throw malformed
            }
            let payload: Payload
            if arguments[2].hasPrefix("@") {
                guard arguments[2].count > 1 else { throw malformed }
                payload = .file(String(arguments[2].dropFirst()))
            } else {
                guard let bytes = hex(arguments[2]) else { throw malformed }
                payload = .bytes(bytes)
            }
            return .send(mode, try peer(arguments[1]), payload)
        case "STREAM":
            try expect(3)
            return .stream(try peer(arguments[0]), name: try name(arguments[1]), path: arguments[2])
        case "RESOURCE":
            try expect(3)
            return .resource(try peer(arguments[0]), name: try name(arguments[1]), path: arguments[2])
        case "CANCEL":
            try expect(1)
            return .cancel(try peer(arguments[0]))
        case "CANCEL-STREAM":
            try expect(2)
            return .cancelStream(try peer(arguments[0]), name: try name(arguments[1]))
        case "PEERS":
            try expect(0)
            return .peers
        case "ADVERTISE":
            try expect(1)
            return .advertise(service: arguments[0])
        case "STOP-ADVERTISING":
            try expect(0)
            return .stopAdvertising
        case "BROWSE":
            try expect(1)
            return .browse(service: arguments[0])
        case "STOP-BROWSING":
            try expect(0)
            return .stopBrowsing
        case "INVITE":
            try expect(3)
            guard let timeout = Double(arguments[1]), timeout >= 0, timeout <= 3600 else { throw malformed }
            let context: Data
            if arguments[2] == "-" {
                context = Data()
            } else {
                guard let bytes = hex(arguments[2]), !bytes.isEmpty else { throw malformed }
                context = bytes
            }
            return .invite(try peer(arguments[0]), timeout: timeout, context: context)
        case "ANSWER":
            try expect(2)
            guard let number = Int(arguments[0]), number >= 1 else { throw malformed }
            switch arguments[1] {
            case "accept": return .answer(number, accept: true)
            case "decline": return .answer(number, accept: false)
            default: throw malformed
            }
        case "DISCONNECT":
            try expect(0)
            return .disconnect
        case "QUIT":
            try expect(0)
            return .quit
        default:
            throw malformed
        }
    }

    /// Hex of either case, an even number of digits; nil otherwise.
    static func hex(_ text: String) -> Data? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes = Data(capacity: digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = HexDigits.value(digits[index]), let low = HexDigits.value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    /// Undoes `Format.name`; nil for a stray `%`, bad hex after it, or bytes that are not UTF-8.
    static func percentDecoded(_ text: String) -> String? {
        let characters = Array(text.utf8)
        var bytes: [UInt8] = []
        var index = 0
        while index < characters.count {
            if characters[index] == UInt8(ascii: "%") {
                guard index + 2 < characters.count, let high = HexDigits.value(characters[index + 1]), let low = HexDigits.value(characters[index + 2])
                else { return nil }
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(characters[index])
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
