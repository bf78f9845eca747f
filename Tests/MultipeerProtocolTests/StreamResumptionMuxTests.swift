import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerProtocol

/// Two members' channel muxes back to back across a lost link (docs/PROTOCOL.md §7.10): each
/// connection has muxes of its own, the members' `MemberStreams` outlive them, and a stream goes
/// on where the receiver stopped.
@Suite("Channel mux: streams across a lost link")
struct StreamResumptionMuxTests {
    static let limits = ChannelMuxTests.limits

    /// Alice (dialer) and bob's streams, and the muxes of their present connection.
    struct Pair {
        let aliceStreams = MemberStreams()
        let bobStreams = MemberStreams()
        var alice: ChannelMux
        var bob: ChannelMux

        init() {
            alice = ChannelMux(weAreDialer: true, limits: StreamResumptionMuxTests.limits, streams: aliceStreams)
            bob = ChannelMux(weAreDialer: false, limits: StreamResumptionMuxTests.limits, streams: bobStreams)
        }

        /// The link was lost and the session resumed: new muxes, the same members.
        mutating func newConnection() {
            alice = ChannelMux(weAreDialer: true, limits: StreamResumptionMuxTests.limits, streams: aliceStreams)
            bob = ChannelMux(weAreDialer: false, limits: StreamResumptionMuxTests.limits, streams: bobStreams)
        }

        mutating func toBob(_ frame: Frame) -> ChannelMux.Decision {
            bob.peerSent(frame, accepting: true, incomingResourcesInSession: 0)
        }

        mutating func toAlice(_ frame: Frame) -> ChannelMux.Decision {
            alice.peerSent(frame, accepting: true, incomingResourcesInSession: 0)
        }

        /// Windows far beyond what the tests send, so that only the acknowledgements hold alice back.
        mutating func widen(_ channel: UInt32) {
            _ = toAlice(.windowUpdate(channel: channel, increment: 64 << 20))
            _ = toAlice(.windowUpdate(channel: 0, increment: 64 << 20))
        }

        /// Alice sends `count` bytes on `channel` in frames as the scheduler allows; bob gets
        /// those that `arrives` lets through, and alice his acknowledgements.
        mutating func send(_ count: Int, on channel: UInt32, arrives: (Int) -> Bool = { _ in true }) -> Int {
            var sent = 0
            while sent < count {
                alice.markReady(channel)
                guard let (next, allowance) = alice.next(), next == channel, allowance > 0 else { break }
                let bytes = min(allowance, 65_524, count - sent)
                alice.served(channel, .data(bytes))
                sent += bytes
                guard arrives(sent) else { continue }
                if case .toInbound(_, _, let reply?) = toBob(.streamData(channel: channel, ByteBuffer(repeating: 1, count: bytes))) {
                    _ = toAlice(reply)
                }
            }
            return sent
        }
    }

    @Test func aStreamResumesFromWhatTheReceiverHas() throws {
        var pair = Pair()
        let opened = pair.alice.openStream()
        let (channel, ordinal) = try #require(opened)
        #expect(ordinal == 0)
        guard case .takeStream(channel, "s", 0, _) = pair.toBob(.streamOpen(channel: channel, name: "s")) else {
            Issue.record("not taken")
            return
        }
        // 900,000 bytes sent, the last 200,000 lost with the link.
        pair.widen(channel)
        #expect(pair.send(900_000, on: channel, arrives: { $0 <= 700_000 }) == 900_000)
        pair.newConnection()
        let resuming = pair.alice.resumeStream(0, name: "s")
        let (resumed, frames) = try #require(resuming)
        #expect(frames == [.streamResume(channel: resumed, ordinal: 0, name: "s")])
        // Not served before the answer.
        pair.alice.markReady(resumed)
        #expect(pair.alice.next() == nil)
        guard case .resumeStream(resumed, 0, let reply) = pair.toBob(frames[0]) else {
            Issue.record("not resumed")
            return
        }
        let arrived = 700_000 / 65_524 * 65_524  // the frames that ended by then
        guard case .streamAcknowledge(resumed, let count, false) = reply.first else {
            Issue.record("no answer first: \(reply)")
            return
        }
        #expect(count == UInt64(arrived))
        guard case .acknowledged(resumed, let acknowledgement) = pair.toAlice(reply[0]) else {
            Issue.record("answer not taken")
            return
        }
        #expect(acknowledgement.answered && !acknowledgement.over && acknowledgement.rewound == 900_000 - count)
        pair.alice.markReady(resumed)
        #expect(pair.alice.next()?.channel == resumed)
    }

    @Test func whatTheReceiverAnswersAResume() throws {
        var pair = Pair()
        // Streams 0 and 1 reach bob; bob reads stream 0's end.
        let openedFirst = pair.alice.openStream()
        let openedSecond = pair.alice.openStream()
        let first = try #require(openedFirst)
        let second = try #require(openedSecond)
        _ = pair.toBob(.streamOpen(channel: first.channel, name: "a"))
        _ = pair.toBob(.streamOpen(channel: second.channel, name: "b"))
        guard case .toInbound(_, true, let closed?) = pair.toBob(.streamClose(channel: first.channel)) else {
            Issue.record("no acknowledgement of the end")
            return
        }
        #expect(closed == .streamAcknowledge(channel: first.channel, received: 0, closed: true))
        // A stream still carried here cannot be resumed on another channel.
        guard case .violation = pair.toBob(.streamResume(channel: 5, ordinal: 1, name: "b")) else {
            Issue.record("resumed a stream an open channel carries")
            return
        }
        pair.newConnection()
        // Stream 0 ended at bob: reset. Stream 1 he still reads: resumed.
        guard case .refuse(1, _, [.streamReset(channel: 1, code: .cancelled)]) = pair.toBob(.streamResume(channel: 1, ordinal: 0, name: "a")) else {
            Issue.record("an ended stream was not reset")
            return
        }
        guard case .resumeStream(3, 1, _) = pair.toBob(.streamResume(channel: 3, ordinal: 1, name: "b")) else {
            Issue.record("a kept stream was not resumed")
            return
        }
        // Stream 2's STREAM_OPEN went with the link: new to bob, answered with 0.
        guard case .takeStream(5, "c", 2, let reply) = pair.toBob(.streamResume(channel: 5, ordinal: 2, name: "c")) else {
            Issue.record("a new stream was not taken")
            return
        }
        #expect(reply.first == .streamAcknowledge(channel: 5, received: 0, closed: false))
        guard case .violation = pair.toBob(.streamResume(channel: 7, ordinal: 4, name: "d")) else {
            Issue.record("an ordinal ahead was not a violation")
            return
        }
    }

    /// With link recovery a stream we close stays ours (and among our 64) until its end is
    /// acknowledged; an opener never has more than 1 MiB of a stream unacknowledged.
    @Test func ourStreamLastsUntilItsEndIsAcknowledgedAndStopsAtTheLimit() throws {
        var pair = Pair()
        let opened = pair.alice.openStream()
        let (channel, _) = try #require(opened)
        _ = pair.toBob(.streamOpen(channel: channel, name: "s"))
        pair.widen(channel)
        // Bob's acknowledgements are lost: alice stops at the limit.
        #expect(pair.send(3 << 20, on: channel, arrives: { _ in false }) == Int(StreamLedger.unacknowledgedLimit))
        #expect(pair.alice.weSend(.streamClose(channel: channel)) == false)
        #expect(pair.alice.outboundCount == 1)
        guard case .violation = pair.toAlice(.streamAcknowledge(channel: channel, received: 10, closed: true)) else {
            Issue.record("a short CLOSED was taken")
            return
        }
        guard case .acknowledged(channel, let acknowledgement) = pair.toAlice(
            .streamAcknowledge(channel: channel, received: StreamLedger.unacknowledgedLimit, closed: true))
        else {
            Issue.record("the end was not taken")
            return
        }
        #expect(acknowledgement.over && pair.alice.outboundCount == 0 && pair.aliceStreams.ledger.keptOrdinals.isEmpty)
    }

    /// Alice closed a stream bob read to its end, and bob's STREAM_ACK with CLOSED went with the
    /// link: alice resumes it, bob answers STREAM_RESET 1, and for alice the stream is over.
    @Test func aStreamWhoseEndsAcknowledgementWasLostIsOverOnResumption() throws {
        var pair = Pair()
        let opened = pair.alice.openStream()
        let (channel, ordinal) = try #require(opened)
        _ = pair.toBob(.streamOpen(channel: channel, name: "s"))
        pair.widen(channel)
        #expect(pair.send(100_000, on: channel) == 100_000)
        #expect(pair.alice.weSend(.streamClose(channel: channel)) == false)
        guard case .toInbound(channel, true, .streamAcknowledge(channel, 100_000, true)?) = pair.toBob(.streamClose(channel: channel)) else {
            Issue.record("bob did not acknowledge the end")
            return
        }
        // ...which alice never reads.
        pair.newConnection()
        let resuming = pair.alice.resumeStream(try #require(ordinal), name: "s")
        let (resumed, frames) = try #require(resuming)
        guard case .refuse(resumed, _, let reply) = pair.toBob(frames[0]), reply == [.streamReset(channel: resumed, code: .cancelled)] else {
            Issue.record("bob did not say the stream ended")
            return
        }
        #expect(pair.toAlice(reply[0]) == .toOutbound(resumed, ended: true))
        #expect(pair.alice.outboundCount == 0 && pair.aliceStreams.ledger.keptOrdinals.isEmpty)
    }

    /// Without link recovery nothing changes: no ordinals, no acknowledgements, a close ends it.
    @Test func withoutLinkRecoveryStreamsAreAsBefore() throws {
        var alice = ChannelMux(weAreDialer: true, limits: Self.limits)
        let opened = alice.openStream()
        let (channel, ordinal) = try #require(opened)
        #expect(ordinal == nil)
        #expect(alice.weSend(.streamClose(channel: channel)) == true)
        var bob = ChannelMux(weAreDialer: false, limits: Self.limits)
        _ = bob.peerSent(.streamOpen(channel: 1, name: "s"), accepting: true, incomingResourcesInSession: 0)
        for _ in 0..<8 {
            #expect(bob.peerSent(.streamData(channel: 1, ByteBuffer(repeating: 0, count: 65_536)), accepting: true, incomingResourcesInSession: 0) == .toInbound(1, ended: false))
        }
    }
}
