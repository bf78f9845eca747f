import Foundation

/// Text from peers (names, chat lines, file names, certificate fields) is untrusted: shown with
/// control characters made visible, so no peer can move the cursor, clear the screen or forge
/// a line.
enum Terminal {
    static func safe(_ text: String, limit: Int = 4_096) -> String {
        var shown = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            switch scalar.value {
            case 0x00..<0x20, 0x7F..<0xA0, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069:
                shown += "\\u{\(String(scalar.value, radix: 16))}"
            default:
                shown.unicodeScalars.append(scalar)
            }
        }
        if text.unicodeScalars.count > limit { shown += "…" }
        return shown
    }

    /// Bytes with binary units: "12.3 MiB".
    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f", value) + " " + units[unit]
    }
}
