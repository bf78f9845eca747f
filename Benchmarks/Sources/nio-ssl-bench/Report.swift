import Foundation

/// One figure of the report; `key` names the scenario for scripts (bulk, roundtrip,
/// roundtrip-event-loop, establishment).
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
    /// For round trips: the 1st percentile of each repetition.
    var p01: Stats? = nil
}

/// A round-trip figure's percentiles, repetition by repetition.
struct RoundTripFigures {
    private var medians: [Double] = []
    private var p01s: [Double] = []
    private var p99s: [Double] = []

    mutating func add(_ times: [Double]) {
        medians.append(percentile(times, 0.5))
        p01s.append(percentile(times, 0.01))
        p99s.append(percentile(times, 0.99))
    }

    func figure(key: String, scenario: String, note: String) -> Figure {
        Figure(key: key, scenario: scenario, unit: "µs median", stats: Stats(medians), p99: Stats(p99s), note: note, p01: Stats(p01s))
    }
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
            if let p01 = figure.p01 { details += "; p1 \(format(p01.median)) µs (\(format(p01.min))–\(format(p01.max)))" }
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
