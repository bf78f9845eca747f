import Foundation

/// The test vectors of docs/PROTOCOL.md §11 by name, read from the spec itself so that the
/// tests and the spec cannot drift apart.
public enum SpecVectorFile {
    public struct Malformed: Error, CustomStringConvertible {
        public let description: String
    }

    public static func load() throws -> [String: [UInt8]] {
        let spec = try String(contentsOf: repositoryRootURL.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        guard let block = spec.components(separatedBy: "<!-- vectors:begin -->").last?.components(separatedBy: "<!-- vectors:end -->").first
        else { throw Malformed(description: "no vectors block in PROTOCOL.md") }
        var vectors: [String: [UInt8]] = [:]
        for section in block.components(separatedBy: "\n### ").dropFirst() {
            let name = String(section.prefix { $0 != "\n" })
            guard let hex = section.components(separatedBy: "```hex\n").last?.components(separatedBy: "```").first else {
                throw Malformed(description: "vector \(name) has no hex block")
            }
            let digits = hex.split(whereSeparator: \.isWhitespace)
            vectors[name] = try digits.map { pair in
                guard let byte = UInt8(pair, radix: 16) else { throw Malformed(description: "vector \(name): \(pair) is not a hex byte") }
                return byte
            }
        }
        return vectors
    }
}
