import Foundation

/// Text from peers (names, chat lines, file names, certificate fields, and error texts that
/// quote them) is untrusted: shown with control and format characters made visible, so no peer
/// can move the cursor, clear the screen, forge a line or disguise its name.
enum Terminal {
    static func safe(_ text: String, limit: Int = 4_096) -> String {
        var shown = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            // Controls move the cursor or end lines; format characters (zero-width, bidi) make
            // one name look like another.
            if scalar.value < 0x20 || (0x7F..<0xA0).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
                || scalar.properties.generalCategory == .format
            {
                shown += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
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
