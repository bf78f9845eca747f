/// `count` reproducible pseudo-random bytes from `seed`, eight per draw (debug builds are slow at one).
public func seededContent(_ count: Int, seed: UInt64) -> [UInt8] {
    var generator = SeededGenerator(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { raw in
        for offset in stride(from: 0, to: count, by: 8) {
            withUnsafeBytes(of: generator.next()) { word in
                for index in 0..<min(8, count - offset) { raw[offset + index] = word[index] }
            }
        }
    }
    return bytes
}
