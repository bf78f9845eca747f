/// Median and spread of repeated measurements of one figure, encoded like multipeer-bench's
/// `Stats` (median, min, max, count, samples) so that one reader handles both files.
struct Stats: Encodable {
    let median: Double
    let min: Double
    let max: Double
    let samples: [Double]

    init(_ samples: [Double]) {
        self.samples = samples
        median = percentile(samples, 0.5)
        min = samples.min() ?? 0
        max = samples.max() ?? 0
    }

    private enum CodingKeys: String, CodingKey { case median, min, max, count, samples }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(median, forKey: .median)
        try container.encode(min, forKey: .min)
        try container.encode(max, forKey: .max)
        try container.encode(samples.count, forKey: .count)
        try container.encode(samples, forKey: .samples)
    }

    /// Spread as a fraction of the median.
    var spread: Double { median == 0 ? 0 : (max - min) / median }
}

/// The median of an even count is the mean of the middle two, as in multipeer-bench; other
/// fractions take the nearest lower rank.
func percentile(_ values: [Double], _ fraction: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    if fraction == 0.5 && sorted.count % 2 == 0 {
        return (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
    return sorted[Swift.min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))]
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}
