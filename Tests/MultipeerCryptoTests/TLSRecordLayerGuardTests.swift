import Foundation
import Logging
@testable import MultipeerCrypto
import MultipeerTestSupport
import NIOCore
import Synchronization
import Testing

/// Collects log messages, for tests.
final class LogLines: Sendable {
    private let lines = Mutex<[(level: Logger.Level, text: String)]>([])

    var all: [(level: Logger.Level, text: String)] { lines.withLock { $0 } }

    var logger: Logger {
        var logger = Logger(label: "test") { _ in
            EventLogHandler { event in
                self.lines.withLock { $0.append((event.level, "\(event.message) \(EventLogHandler.fields(of: event))")) }
            }
        }
        logger.logLevel = .trace
        return logger
    }
}

/// The guard that decides, once per process and suite, whether the library's record layer may
/// be used, and the switch that overrides it.
@Suite("TLS record layer guard and switch")
struct TLSRecordLayerGuardTests {
    /// On the OpenSSL this is built against (a tested one), both layers agree in every suite,
    /// and each suite is checked once.
    @Test func theLinkedOpenSSLAgreesInEverySuite() throws {
        #expect(TLSRecordLayerGuard.isTested(.linked), "OpenSSL \(TLSRecordLayerGuard.OpenSSLRelease.linked) is not a tested release")
        let check = TLSRecordLayerGuard()
        let lines = LogLines()
        for suite in TLSCipherSuite.allCases {
            #expect(check.verdict(for: suite, logger: lines.logger) == .agrees, "\(suite)")
            let cost = try #require(check.cost(of: suite))
            // What it costs, once per process and suite (reported, not a limit).
            print("TLS record layer guard: \(suite.openSSLName) checked in \(cost)")
        }
        for suite in TLSCipherSuite.allCases { #expect(check.verdict(for: suite, logger: lines.logger) == .agrees) }
        #expect(check.checksRun == TLSCipherSuite.allCases.count)
        #expect(lines.all.filter { $0.level == .debug }.count == TLSCipherSuite.allCases.count)
        #expect(!lines.all.contains { $0.level >= .warning })
    }

    /// The guard runs for the first connection of a suite, not for every connection.
    @Test func theGuardRunsOncePerSuiteNotPerConnection() throws {
        let check = TLSRecordLayerGuard()
        for _ in 0..<5 {
            let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordLayer: .guarded, recordLayerGuard: check)
            try pair.handshake()
            #expect(pair.client.recordLayer == .library && pair.server.recordLayer == .library)
            #expect(pair.client.recordLayerReason?.contains("agrees") == true)
        }
        #expect(check.checksRun == 1)
        // The process's own guard has checked at most every suite, however many connections ran.
        #expect(TLSRecordLayerGuard.process.checksRun <= TLSCipherSuite.allCases.count)
    }

    @Test func testedReleasesAreTheNamedRange() {
        typealias Release = TLSRecordLayerGuard.OpenSSLRelease
        #expect(TLSRecordLayerGuard.testedOpenSSLSeries == [Release(major: 3, minor: 0), Release(major: 3, minor: 5)])
        for tested in [Release(major: 3, minor: 0), Release(major: 3, minor: 0, patch: 19), Release(major: 3, minor: 5, patch: 7), Release(major: 3, minor: 5, patch: 99)] {
            #expect(TLSRecordLayerGuard.isTested(tested), "\(tested)")
        }
        for untested in [
            Release(major: 1, minor: 1, patch: 1), Release(major: 3, minor: 2, patch: 1), Release(major: 3, minor: 4),
            Release(major: 3, minor: 6), Release(major: 4, minor: 0),
        ] {
            #expect(!TLSRecordLayerGuard.isTested(untested), "\(untested)")
        }
    }

    /// An OpenSSL outside the tested range: OpenSSL's layer protects the records, and the log
    /// says why, once.
    @Test func anUntestedOpenSSLFallsBackAndSaysWhy() throws {
        let check = TLSRecordLayerGuard(release: .init(major: 3, minor: 6, patch: 0))
        let lines = LogLines()
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordLayer: .guarded, recordLayerGuard: check, logger: lines.logger)
        try pair.handshake()
        #expect(pair.client.recordLayer == .openSSL && pair.server.recordLayer == .openSSL)
        #expect(pair.client.recordLayerReason?.contains("OpenSSL 3.6.0 is not one of the tested releases (3.0.x, 3.5.x)") == true)
        let warnings = lines.all.filter { $0.level == .warning }
        #expect(warnings.count == 1)
        #expect(warnings.first?.text.contains("falling back to OpenSSL's record layer") == true)
        #expect(warnings.first?.text.contains("why=OpenSSL 3.6.0 is not one of the tested releases") == true)
        // And the connection works.
        try pair.client.write(ByteBuffer(string: "over OpenSSL's records"))
        pair.pump()
        #expect(try pair.read(pair.server) == Array("over OpenSSL's records".utf8))
    }

    /// The switch's `library` lets an untested release through to the comparison, never past
    /// it: a difference still falls back.
    @Test func anyReleaseStillGoesThroughTheComparison() throws {
        let untested = TLSRecordLayerGuard(release: .init(major: 3, minor: 6, patch: 0))
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordLayer: .comparedOnAnyRelease, recordLayerGuard: untested)
        try pair.handshake()
        #expect(pair.client.recordLayer == .library && pair.server.recordLayer == .library)
        #expect(untested.checksRun == 1)
        let altered = TLSRecordLayerGuard(release: .init(major: 3, minor: 6, patch: 0), fault: .alteredTrafficSecret)
        for suite in TLSCipherSuite.allCases {
            guard case .refused = altered.verdict(for: suite, onAnyRelease: true, logger: LogLines().logger) else {
                Issue.record("\(suite): an altered secret passed the comparison")
                continue
            }
        }
    }

    /// A difference between the layers (here a traffic secret altered on its way to the
    /// library) is caught by the comparison: OpenSSL's layer is used, and the log says why.
    @Test func aDifferenceFallsBackAndSaysWhy() throws {
        let check = TLSRecordLayerGuard(fault: .alteredTrafficSecret)
        for suite in TLSCipherSuite.allCases {
            guard case .refused(let why) = check.verdict(for: suite, logger: LogLines().logger) else {
                Issue.record("\(suite): the altered secret went unnoticed")
                continue
            }
            #expect(why == "the client's records sealed by the library differ from OpenSSL's", "\(suite)")
        }
        let lines = LogLines()
        let pair = try EnginePair(
            clientIdentity: nil, serverIdentity: nil, recordLayer: .guarded, recordLayerGuard: TLSRecordLayerGuard(fault: .alteredTrafficSecret),
            logger: lines.logger)
        try pair.handshake()
        #expect(pair.client.recordLayer == .openSSL && pair.server.recordLayer == .openSSL)
        #expect(lines.all.contains { $0.level == .warning && $0.text.contains("why=the client's records sealed by the library differ") })
        try pair.server.write(ByteBuffer(string: "still private"))
        pair.pump()
        #expect(try pair.read(pair.client) == Array("still private".utf8))
    }

    @Test func theSwitchIsReadAsOneOfTwoWords() {
        #expect(TLSRecordLayerPolicy.parse(nil) == (.guarded, nil))
        #expect(TLSRecordLayerPolicy.parse("") == (.guarded, nil))
        #expect(TLSRecordLayerPolicy.parse("openssl") == (.forced(.openSSL), nil))
        #expect(TLSRecordLayerPolicy.parse("OpenSSL") == (.forced(.openSSL), nil))
        // `library` never skips the comparison: it only lets an untested release through it.
        #expect(TLSRecordLayerPolicy.parse("library") == (.comparedOnAnyRelease, nil))
        #expect(TLSRecordLayerPolicy.parse("boringssl") == (.guarded, "boringssl"))
    }

    /// In the CI run with `MULTIPEER_TLS_RECORD_LAYER` set, every engine left to choose uses the
    /// layer it names; unset, the guard's verdict on this OpenSSL (the library's). The line
    /// printed is what scripts/test looks for, so the run cannot test the other layer unnoticed.
    @Test func engineChoiceFollowsTheSwitch() throws {
        let value = ProcessInfo.processInfo.environment[TLSRecordLayerPolicy.environmentVariable]
        let expected: TLSRecordLayerKind
        switch TLSRecordLayerPolicy.parse(value).policy {
        case .forced(let kind): expected = kind
        case .guarded, .comparedOnAnyRelease: expected = .library
        }
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil)
        try pair.handshake()
        #expect(pair.client.recordLayer == expected && pair.server.recordLayer == expected)
        print("TLS record layer in use by MultipeerCryptoTests: \(pair.client.recordLayer?.rawValue ?? "none")")
    }
}
