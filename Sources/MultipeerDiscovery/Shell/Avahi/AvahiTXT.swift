import CAvahiClient
import MultipeerProtocol

/// TXT strings to and from Avahi's string lists (C interop).
enum AvahiTXT {
    /// A list Avahi serialises in the order given (it prepends, then reverses when it serialises).
    /// The caller frees it with `cavahi_string_list_free`.
    static func list(_ strings: [[UInt8]]) -> UnsafeMutablePointer<AvahiStringList>? {
        var list: UnsafeMutablePointer<AvahiStringList>?
        for string in strings {
            list = string.withUnsafeBufferPointer { cavahi_string_list_add_arbitrary(list, $0.baseAddress, $0.count) }
        }
        return list
    }

    /// The strings of a list Avahi handed over, in the order they were on the wire, at most `limit`.
    static func strings(_ list: UnsafeMutablePointer<AvahiStringList>?, limit: Int = 256) -> [[UInt8]] {
        var strings: [[UInt8]] = []
        var node = list
        while let current = node, strings.count < limit {
            let size = cavahi_string_list_get_size(current)
            if let text = cavahi_string_list_get_text(current) {
                strings.append(Array(UnsafeBufferPointer(start: text, count: size)))
            } else {
                strings.append([])
            }
            node = cavahi_string_list_get_next(current)
        }
        return strings
    }
}
