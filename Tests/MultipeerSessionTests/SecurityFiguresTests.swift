import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerSession
@testable import MultipeerProtocol

/// SECURITY.md's figures come from the code's constants: each sentence below is built from the
/// constant and must stand in the document word for word, so changing one without the other fails.
@Suite struct SecurityFiguresTests {
    static let document: String = {
        let url = repositoryRootURL.appendingPathComponent("SECURITY.md")
        // Lines are wrapped: compare with runs of white space folded to one space.
        let text = (try? String(contentsOf: url, encoding: .utf8)) ?? ""
        return text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }()

    static func grouped(_ value: Int) -> String {
        let digits = String(value)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { out += "," }
            out.append(digit)
        }
        return out
    }

    static func mebibytes(_ bytes: UInt32) -> String { "\(bytes >> 20) MiB" }

    @Test func figuresMatchTheConstants() {
        let channels = ChannelConfiguration()
        let sentences = [
            "\(Self.mebibytes(channels.channelReceiveWindow)) per channel and \(Self.mebibytes(channels.connectionReceiveWindow)) per connection here",
            "The accept queue is \(Self.grouped(StrangerListenerOptions.backlog)) deep",
            "caps it at \(InvitationTiming.maximumAnswerWait.nanoseconds / 1_000_000_000) s (`InvitationTiming.maximumAnswerWait`",
            "at most \(Self.grouped(AcceptPacing.perSecond)) per second, \(AcceptPacing.burst) at once (`AcceptPacing`)",
            "At most \(InvitationListener.maximumPending) invitation connections are held at once per advertiser, at most \(InvitationListener.maximumPendingPerSource) from one source",
            "at most \(SessionEngineConfiguration.defaultPendingConnections) inbound connections",
            "most \(channels.resumableTransfers) of them (`ChannelConfiguration.resumableTransfers`)",
            "A kept partial lives \(channels.resumeLifetime.nanoseconds / 60_000_000_000) minutes (`resumeLifetime`)",
            "the cache keeps \(TrustEvaluationCache.capacity) entries (`TrustEvaluationCache.capacity`)",
            "outlives the last session that held it by \(TLSContext.defaultSharedContextGrace.components.seconds) s (`TLSContext.sharedContextGrace`)",
        ] + Self.recordLayerSentences + Self.recoverySentences
        #expect(!Self.document.isEmpty, "SECURITY.md not found")
        for sentence in sentences {
            let found = Self.document.contains(sentence)
            #expect(found, "SECURITY.md lacks: \(sentence)")
        }
    }

    /// "Link recovery": what a suspended member and its acknowledgements cost.
    static var recoverySentences: [String] {
        let policy = RecoveryPolicy()
        return [
            "each with \(DeliveryLedger.entryCharge) bytes more than its length",
            "acknowledges at least every \(DeliveryLedger.acknowledgementMessages) messages or \(DeliveryLedger.acknowledgementBytes >> 10) KiB, or \(policy.acknowledgementDelay.nanoseconds / 1_000_000) ms after a delivery",
            "once the grace period (\(policy.grace.nanoseconds / 1_000_000_000) s by default)",
            "each connect attempt bounded at \(DialPlan.resumptionConnectTimeout.nanoseconds / 1_000_000_000) s and each handshake at \(DialPlan.resumptionHandshakeTimeout.nanoseconds / 1_000_000_000) s",
            "it dials at most once a second after its first \(policy.redialDelays.count) tries",
            "at most \(RecoverableMember.maxDiscoveredEndpoints) addresses are kept from one report",
            "endpoint's connect starting \(DialPlan.resumptionAttemptDelay.nanoseconds / 1_000_000) ms after the one before it",
            "(\(RecoverableMember.maxDiscoveredEndpoints + 2): introduced, old and \(RecoverableMember.maxDiscoveredEndpoints) discovered",
            "after the introduced one began, unless that host took the TCP connection; its handshake then fails (or stalls until the \(DialPlan.resumptionHandshakeTimeout.nanoseconds / 1_000_000_000) s deadline)",
            "STREAM_ACK every \(grouped(Int(StreamLedger.acknowledgementInterval))) bytes",
            "at most \(grouped(Int(StreamLedger.unacknowledgedLimit))) bytes per stream",
        ]
    }

    /// "The TLS record layer": tested releases, the switch and the limits of both layers.
    static var recordLayerSentences: [String] {
        let tested = TLSRecordLayerGuard.testedOpenSSLSeries.map { "\($0.major).\($0.minor).x" }.joined(separator: " and ")
        let withoutData = TLSRecordLayer.maximumRecordsWithoutData
        let perKey = WireLimits.tlsRecordsPerKeyUpdate
        return [
            "Tested releases: OpenSSL \(tested) (`TLSRecordLayerGuard.testedOpenSSLSeries`)",
            "`\(TLSRecordLayerPolicy.environmentVariable)=openssl` forces OpenSSL's layer",
            "more than \(withoutData) records in a row without application data end the connection (`TLSRecordLayer.maximumRecordsWithoutData`",
            "held up to \(grouped(TLSRecordLayer.maximumHandshakeMessageLength)) bytes (`TLSRecordLayer.maximumHandshakeMessageLength`",
            "before \(grouped(Int(perKey))) records (2^\(perKey.trailingZeroBitCount)) under one key (`WireLimits.tlsRecordsPerKeyUpdate`",
            "more than \(withoutData) KeyUpdates or session tickets in a row without application data, or more than \(withoutData) requests while this side writes nothing",
        ]
    }

    /// 2^n in the text stands for the record limit, so it must be a power of two.
    @Test func theRecordsPerKeyUpdateAreAPowerOfTwo() {
        #expect(WireLimits.tlsRecordsPerKeyUpdate.nonzeroBitCount == 1)
    }
}
