/// What follows the preambles (docs/PROTOCOL.md §3 and §4), computed alike by both sides.
public enum Negotiation {
    public enum Outcome: Hashable, Sendable {
        case tls(version: UInt8)
        case plaintext(version: UInt8)
        case refused(Refusal)
    }

    public enum Refusal: Hashable, Sendable {
        case versionMismatch
        case encryptionIncompatible
    }

    public static func outcome(dialer: Preamble, listener: Preamble) -> Outcome {
        let lowest = max(dialer.minVersion, listener.minVersion)
        let version = min(dialer.maxVersion, listener.maxVersion)
        guard version >= lowest else { return .refused(.versionMismatch) }

        let preferences: Set = [dialer.encryptionPreference, listener.encryptionPreference]
        if preferences == [.none, .required] { return .refused(.encryptionIncompatible) }  // rule 1
        if preferences.contains(.required) { return .tls(version: version) }  // rule 2
        if preferences == [.optional] { return .tls(version: version) }  // rule 3
        if dialer.hasIdentity || listener.hasIdentity { return .tls(version: version) }  // rule 4
        return .plaintext(version: version)  // rule 5
    }
}
