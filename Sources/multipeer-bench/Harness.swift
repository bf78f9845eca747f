import CMultipeerShims
import Foundation

/// Median and spread of repeated measurements of one figure. In JSON, the samples themselves
/// are kept when there are a few (repetitions); thousands (round trips) are summarised by
/// their count and 1st/99th percentiles, so a kept run stays small enough to compare.
struct Stats: Codable {
    let median: Double
    let min: Double
    let max: Double
    let samples: [Double]

    private static let samplesKeptInJSON = 50

    init(_ samples: [Double]) {
        let sorted = samples.sorted()
        self.samples = samples
        median = sorted.isEmpty ? 0 : sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
        min = sorted.first ?? 0
        max = sorted.last ?? 0
    }

    private enum CodingKeys: String, CodingKey { case median, min, max, samples, count, p01, p99 }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        median = try container.decode(Double.self, forKey: .median)
        min = try container.decode(Double.self, forKey: .min)
        max = try container.decode(Double.self, forKey: .max)
        samples = try container.decodeIfPresent([Double].self, forKey: .samples) ?? []
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(median, forKey: .median)
        try container.encode(min, forKey: .min)
        try container.encode(max, forKey: .max)
        try container.encode(samples.count, forKey: .count)
        if samples.count <= Self.samplesKeptInJSON {
            try container.encode(samples, forKey: .samples)
        } else {
            try container.encode(percentile(samples, 0.01), forKey: .p01)
            try container.encode(percentile(samples, 0.99), forKey: .p99)
        }
    }

    /// Spread as a fraction of the median.
    var spread: Double { median == 0 ? 0 : (max - min) / median }
}

/// One line of the report: the library's figure, the baseline's, their ratio, and the target.
struct Result: Codable {
    let scenario: String
    let unit: String
    let library: Stats
    let baselineName: String?
    let baseline: Stats?
    /// library / baseline for rates, baseline / library for times, so that higher is better.
    let ratio: Double?
    let target: String
    let met: Bool?
    let note: String?
    /// The ratio in each repetition, where the baseline ran beside the library's run (so drift
    /// on a shared machine hits both alike); `ratio` is then their median.
    var ratios: Stats? = nil
    /// For establishment: the identities' key type (ed25519, p256) and the key exchange group
    /// the library's handshake and the OpenSSL baseline's negotiated, by OpenSSL's names.
    var keyType: String? = nil
    var keyExchangeGroup: String? = nil
    var baselineKeyExchangeGroup: String? = nil
    /// CPU time per MiB on each side of the transfer (SideCPU), where measured.
    var perSide: PerSide? = nil
}

/// Each repetition's library figure over the baseline measured next to it.
func pairedRatios(_ library: [Double], _ baseline: [Double]) -> Stats {
    Stats(zip(library, baseline).map { $1 > 0 ? $0 / $1 : 0 })
}

enum Clock {
    static func seconds(_ body: () async throws -> Void) async rethrows -> Double {
        let start = ContinuousClock.now
        try await body()
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}

func percentile(_ values: [Double], _ fraction: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))]
}

/// Peak and current resident memory of this process, from /proc (kB).
enum Memory {
    static func field(_ name: String) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0
        }
        return 0
    }

    static var residentKiB: Int { field("VmRSS") }

    /// Bytes malloc has handed out and not taken back (glibc's mallinfo2). Unlike RSS, it does not
    /// hide new allocations that reuse memory freed by earlier scenarios.
    static var heapInUseBytes: Int { Int(mp_heap_bytes_in_use()) }
    static var peakResidentKiB: Int { field("VmHWM") }

    /// Resets VmHWM to the current RSS (Linux: write 5 to clear_refs).
    static func resetPeak() {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }
}
