import Foundation

/// One figure of the report; `key` names the scenario for scripts (bulk, roundtrip, establishment).
struct Figure: Encodable {
    let key: String
    let scenario: String
    let unit: String
    let stats: Stats
    /// For round trips: the 99th percentile of each repetition.
    let p99: Stats?
    let note: String?
    /// For establishment: the key exchange group the server chose (OpenSSL's name).
    var keyExchangeGroup: String? = nil
}

struct Document: Encodable {
    let tool = "nio-ssl-bench"
    let date: String
    let quick: Bool
    let repetitions: Int
    let results: [Figure]
    /// Which certificates, and which groups were offered (nil: swift-nio-ssl's default).
    let identities: String
    let curves: String?
}

enum Report {
    static func print(_ figures: [Figure]) {
        Swift.print("")
        Swift.print(pad("scenario", 62) + pad("median", 20) + "min–max")
        for figure in figures {
            let range = "\(format(figure.stats.min))–\(format(figure.stats.max))"
            Swift.print(pad(figure.scenario, 62) + pad("\(format(figure.stats.median)) \(figure.unit)", 20) + range)
            var details = String(format: "    spread %.0f%%", figure.stats.spread * 100)
            if let p99 = figure.p99 { details += "; p99 \(format(p99.median)) µs (\(format(p99.min))–\(format(p99.max)))" }
            if let note = figure.note { details += "; \(note)" }
            Swift.print(details)
        }
    }

    static func write(_ document: Document, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(document).write(to: URL(fileURLWithPath: path))
    }

    static func format(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? String(text.prefix(width - 1)) + " " : text + String(repeating: " ", count: width - text.count)
    }
}
