import Foundation
import MultipeerSession
import MultipeerProtocol

public let MCErrorDomain: String = "MCErrorDomain"

/// Why a stream or resource transfer failed, finer than `MCError.Code` (`MCError.transfer`):
/// switch over its `code` (`.integrityFailure`, `.cancelledByPeer`, `.storageFailure`, ...).
public typealias MCTransferError = TransferError

/// Errors of this framework, with Apple's domain and codes.
///
/// Catch it as Apple's code does: `catch let error as MCError where error.code == .notConnected`,
/// or `catch MCError.notConnected`.
public struct MCError: Error, CustomNSError, Hashable, Sendable, CustomStringConvertible {
    public enum Code: Int, Sendable, CaseIterable {
        case unknown = 0
        case notConnected = 1
        case invalidParameter = 2
        case unsupported = 3
        case timedOut = 4
        case cancelled = 5
        case unavailable = 6
    }

    public let code: Code
    /// What went wrong, in words; never contains keys or payload bytes.
    public let reason: String
    /// For a stream or resource that failed: the transfer's own reason (a SHA-256 mismatch, the
    /// peer's cancel or reset code, a storage failure), which `code` folds into Apple's few codes.
    public let transfer: MCTransferError?

    public init(_ code: Code, reason: String? = nil) {
        self.init(code, reason: reason, transfer: nil)
    }

    init(_ code: Code, reason: String?, transfer: MCTransferError?) {
        self.code = code
        self.reason = reason ?? "\(code)"
        self.transfer = transfer
    }

    /// Apple's initializer. Only the localized description survives (as `reason`): the error stays
    /// Sendable and Hashable, and never carries arbitrary objects.
    public init(_ code: Code, userInfo: [String: Any]) {
        self.init(code, reason: userInfo[NSLocalizedDescriptionKey] as? String)
    }

    public static var errorDomain: String { MCErrorDomain }
    public var errorCode: Int { code.rawValue }
    public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: reason] }
    public var description: String { "MCError.\(code) (\(MCErrorDomain) \(code.rawValue)): \(reason)" }

    public static var unknown: Code { .unknown }
    public static var notConnected: Code { .notConnected }
    public static var invalidParameter: Code { .invalidParameter }
    public static var unsupported: Code { .unsupported }
    public static var timedOut: Code { .timedOut }
    public static var cancelled: Code { .cancelled }
    public static var unavailable: Code { .unavailable }
}

extension MCError.Code {
    /// Lets `catch MCError.notConnected` match any thrown MCError with that code.
    public static func ~= (code: MCError.Code, error: any Error) -> Bool {
        (error as? MCError)?.code == code
    }
}
