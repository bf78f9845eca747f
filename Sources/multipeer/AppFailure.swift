import ArgumentParser

/// Why a command failed, and the exit status a script sees for it (listed by `multipeer help`).
struct AppFailure: Error, CustomStringConvertible {
    enum Kind: Int32, CaseIterable {
        /// Bad option values, unreadable files, discovery unavailable.
        case setup = 2
        /// `send`: no peer of that name was found in time; `receive`: nothing arrived in time.
        case notFound = 3
        /// The peer declined the invitation, or its session was full or could not agree on encryption.
        case declined = 4
        /// No answer to the invitation in time, or the connection could not be made.
        case notConnected = 5
        /// A certificate was not trusted: this side rejected the peer, or the peer rejected this side.
        case untrusted = 6
        /// The transfer failed: cancelled, connection lost, or the file did not verify.
        case transferFailed = 7
        /// Ctrl-C.
        case interrupted = 130

        var summary: String {
            switch self {
            case .setup: "setup failed (options, files, discovery)"
            case .notFound: "peer not found, or nothing received, in time"
            case .declined: "invitation declined (or session full, or encryption incompatible)"
            case .notConnected: "no answer in time, or the connection failed"
            case .untrusted: "certificate not trusted (by this side or by the peer)"
            case .transferFailed: "transfer failed"
            case .interrupted: "interrupted"
            }
        }
    }

    let kind: Kind
    let message: String

    init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    var description: String { message }
    var exitCode: ExitCode { ExitCode(kind.rawValue) }

    /// The exit-status table for help texts.
    static var table: String {
        (["0 success"] + Kind.allCases.map { "\($0.rawValue) \($0.summary)" }).joined(separator: "\n")
    }
}
