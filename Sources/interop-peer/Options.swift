import Foundation
import Logging
@_spi(Testing) import MultipeerConnectivity
import MultipeerCrypto

/// The command line (Interop/HARNESS.md, "Command line").
struct Options {
    enum Trust {
        case accept, reject
        /// Accepts a peer whose chain verifies to these anchors.
        case authority(TrustEvaluation)
    }

    var name = "swift"
    var encryption = MCEncryptionPreference.required
    var identityFile: String?
    var passwordFile: String?
    var trust = Trust.accept
    var resourceDirectory: String?
    var keepalive: Duration?
    /// The address to listen on; loopback unless a test gives one inside a namespace of its own.
    var listenAddress = "127.0.0.1"
    /// Lowered limits, so that a peer under test meets epoch changes and KeyUpdates early.
    var datagramsPerEpoch: UInt64?
    var recordsPerKeyUpdate: UInt64?
    /// The one interface ADVERTISE and BROWSE use for multicast DNS.
    var discoveryInterface = "lo"
    /// The session's log on standard error from this level on; none by default.
    var logLevel: Logger.Level?

    static let usage = """
        usage: interop-peer [--name NAME] [--encryption required|optional|none]
                            [--identity FILE.p12 --password-file FILE] [--trust accept|reject|ca:PEMFILE]
                            [--resource-dir DIR] [--keepalive SECONDS] [--listen IP]
                            [--datagrams-per-epoch N] [--records-per-key-update N] [--interface NAME]
                            [--log-level trace|debug|info|notice|warning|error|critical]
        """

    struct Invalid: Error, CustomStringConvertible {
        let description: String
    }

    static func parse(_ arguments: [String]) throws(Invalid) -> Options {
        var options = Options()
        var remaining = arguments[...]
        while let flag = remaining.popFirst() {
            guard let value = remaining.popFirst() else { throw Invalid(description: "\(flag) needs a value") }
            switch flag {
            case "--name": options.name = value
            case "--encryption":
                switch value {
                case "required": options.encryption = .required
                case "optional": options.encryption = .optional
                case "none": options.encryption = .none
                default: throw Invalid(description: "--encryption \(value): required, optional or none")
                }
            case "--identity": options.identityFile = value
            case "--password-file": options.passwordFile = value
            case "--trust": options.trust = try trust(value)
            case "--resource-dir": options.resourceDirectory = value
            case "--keepalive":
                guard let seconds = Double(value), seconds > 0, seconds <= 3600 else {
                    throw Invalid(description: "--keepalive \(value): seconds, more than 0 and at most 3600")
                }
                options.keepalive = .milliseconds(Int64(seconds * 1000))
            case "--listen":
                guard isIPv4Literal(value) || isIPv6Literal(value) else {
                    throw Invalid(description: "--listen \(value): an IPv4 or IPv6 address")
                }
                options.listenAddress = value
            case "--datagrams-per-epoch": options.datagramsPerEpoch = try count(flag, value)
            case "--records-per-key-update": options.recordsPerKeyUpdate = try count(flag, value)
            case "--interface":
                guard !value.isEmpty, value.utf8.count < 16, !value.contains("/") else {
                    throw Invalid(description: "--interface \(value): an interface name")
                }
                options.discoveryInterface = value
            case "--log-level":
                guard let level = Logger.Level(rawValue: value) else {
                    throw Invalid(description: "--log-level \(value): trace, debug, info, notice, warning, error or critical")
                }
                options.logLevel = level
            default: throw Invalid(description: "unknown option \(flag)")
            }
        }
        guard (options.identityFile == nil) == (options.passwordFile == nil) else {
            throw Invalid(description: "--identity and --password-file go together")
        }
        return options
    }

    /// A count from 1 to 2^32.
    private static func count(_ flag: String, _ value: String) throws(Invalid) -> UInt64 {
        guard let count = UInt64(value), count >= 1, count <= 1 << 32 else {
            throw Invalid(description: "\(flag) \(value): a count from 1 to 4294967296")
        }
        return count
    }

    private static func trust(_ value: String) throws(Invalid) -> Trust {
        switch value {
        case "accept": return .accept
        case "reject": return .reject
        case _ where value.hasPrefix("ca:"):
            let path = String(value.dropFirst(3))
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw Invalid(description: "cannot read \(path)")
            }
            // Every certificate in the file is an anchor (a root, or an intermediate and its root).
            guard let anchors = try? Certificate.chain(pemEncoded: pem), !anchors.isEmpty else {
                throw Invalid(description: "\(path) holds no PEM certificate")
            }
            return .authority(TrustEvaluation(anchors: anchors))
        default: throw Invalid(description: "--trust \(value): accept, reject or ca:PEMFILE")
        }
    }

    /// The identity from the .p12 file, or nil when none was given.
    func identity() throws -> SecurityIdentity? {
        guard let identityFile, let passwordFile else { return nil }
        // The password is the file's first line; editors add a newline.
        let password = try String(contentsOfFile: passwordFile, encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false).first.map(String.init) ?? ""
        return try SecurityIdentity(pkcs12File: identityFile, password: password)
    }

    var configuration: MCSessionConfiguration {
        var configuration = MCSessionConfiguration()
        configuration.listenAddress = listenAddress
        if let datagramsPerEpoch { configuration.datagramsPerEpoch = datagramsPerEpoch }
        if let recordsPerKeyUpdate { configuration.tlsRecordsPerKeyUpdate = recordsPerKeyUpdate }
        if let logLevel {
            var logger = Logger(label: "interop-peer") { StreamLogHandler.standardError(label: $0) }
            logger.logLevel = logLevel
            configuration.logger = logger
        }
        if let resourceDirectory { configuration.resourceDirectory = URL(fileURLWithPath: resourceDirectory) }
        if let keepalive {
            configuration.keepaliveInterval = keepalive
            // A peer is declared dead after missing several pings, as with the library's defaults.
            configuration.deadPeerDeadline = max(configuration.deadPeerDeadline, keepalive * 4.5)
        }
        return configuration
    }
}

/// Literal checks for `--listen`, without the resolver (a name would not be an address).
private func isIPv4Literal(_ text: String) -> Bool {
    var address = in_addr()
    return inet_pton(AF_INET, text, &address) == 1
}

private func isIPv6Literal(_ text: String) -> Bool {
    var address = in6_addr()
    return inet_pton(AF_INET6, text, &address) == 1
}
