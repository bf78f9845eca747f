import Foundation
import Logging
import Synchronization

/// Who protects a connection's application records once OpenSSL's handshake is done.
package enum TLSRecordLayerKind: String, Sendable, Equatable, CaseIterable {
    /// `TLSRecordLayer`, with the traffic secrets taken from the handshake.
    case library
    /// OpenSSL's own, through SSL_write and SSL_read.
    case openSSL = "openssl"
}

/// How an engine picks its record layer.
package enum TLSRecordLayerPolicy: Sendable, Equatable {
    /// `TLSRecordLayerGuard` decides, once per process and cipher suite.
    case guarded
    /// The guard decides by comparing the layers alone, even on an OpenSSL release it was not
    /// tested with (the switch set to `library`): the comparison still runs, so no setting
    /// hands records to the library's layer unchecked.
    case comparedOnAnyRelease
    /// This layer, whatever the guard would say (tests; `openssl` from the switch).
    case forced(TLSRecordLayerKind)

    /// The switch, read once per process: `openssl` forces OpenSSL's own record layer;
    /// `library` lets the guard accept the library's on an untested OpenSSL release when the
    /// comparison agrees. Unset, the guard decides.
    package static let environmentVariable = "MULTIPEER_TLS_RECORD_LAYER"

    /// What the process's environment asks for; `.guarded` when the switch is unset or not
    /// understood.
    package static let environment: TLSRecordLayerPolicy = parse(ProcessInfo.processInfo.environment[environmentVariable]).policy

    /// The switch's value when it is set but names no layer, for the one warning about it.
    private static let misunderstood: String? = parse(ProcessInfo.processInfo.environment[environmentVariable]).misunderstood

    package static func parse(_ value: String?) -> (policy: TLSRecordLayerPolicy, misunderstood: String?) {
        guard let value, !value.isEmpty else { return (.guarded, nil) }
        switch TLSRecordLayerKind(rawValue: value.lowercased()) {
        case .openSSL: return (.forced(.openSSL), nil)
        case .library: return (.comparedOnAnyRelease, nil)
        case nil: return (.guarded, value)
        }
    }

    private static let announced = Atomic<Bool>(false)

    /// Says once per process that the switch is in force, or that it was not understood.
    static func announceEnvironment(to logger: Logger) {
        guard announced.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        if case .forced(let kind) = environment {
            logger.notice("TLS records: \(kind.rawValue) record layer forced by \(environmentVariable)")
        } else if environment == .comparedOnAnyRelease {
            logger.notice("TLS records: \(environmentVariable)=library; the guard compares the layers on any OpenSSL release")
        } else if let misunderstood {
            logger.warning(
                "TLS records: \(environmentVariable) is neither 'openssl' nor 'library'; the record layer guard decides",
                metadata: ["value": "\(misunderstood.prefix(32))"])
        }
    }
}
