import Foundation
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Synchronization
import Testing
import MultipeerProtocol

/// Streams across a lost link (docs/PROTOCOL.md §7.10) between two engines over loopback: a
/// stream goes on where the reader stopped, and the reader gets every byte once and in order.
/// Links are reset with `ss -K`, as in `LinkRecoveryTests`; the rules are `StreamLedgerTests`'.
@Suite("Streams across a lost link", .serialized, .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/ss")))
struct LinkRecoveryStreamTests {
    /// Reads the stream on a task, counting as it goes.
    final class Reading: Sendable {
        let received = ManagedCounter()
        let task: Task<[UInt8], any Error>

        init(_ reader: ByteStreamReader) {
            let received = received
            task = Task {
                try await withDeadline(seconds: 90) {
                    var bytes: [UInt8] = []
                    for try await chunk in reader {
                        bytes += chunk.readableBytesView
                        received.add(chunk.readableBytes)
                    }
                    return bytes
                }
            }
        }
    }

    static func write(_ content: [UInt8], to writer: ByteStreamWriter) -> Task<Void, any Error> {
        Task {
            try await StreamChannelTests.writeInPieces(content, to: writer, seed: 11)
            try await writer.finish()
        }
    }

    /// 6 MiB written while the link is reset three times: every byte arrives once, in order; the
    /// stream fails on neither side; the app never hears the peer left.
    @Test func aStreamWrittenAcrossResetsArrivesOnceAndInOrder() async throws {
        let (alice, bob) = try await LinkRecoveryTests.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let content = seededContent(6 << 20, seed: 21)
        let writer = try alice.engine.openStream(named: "across", to: bob.peer.identifier)
        let writing = Self.write(content, to: writer)
        try #require(try await eventually { bob.openedStreams.count == 1 })
        let reading = Reading(bob.openedStreams[0])
        for mebibytes in [1, 3, 5] {
            try #require(try await eventually(seconds: 30) { reading.received.value >= mebibytes << 20 })
            try await LinkRecoveryTests.resetLinks(alice, bob)
        }
        let received = try await reading.task.value
        try await withDeadline(seconds: 30) { try await writing.value }
        #expect(received.count == content.count)
        #expect(received == content)
        #expect(writer.failure == nil && bob.openedStreams.count == 1)
        #expect(alice.states(of: bob) == [.connecting, .connected] && bob.states(of: alice) == [.connecting, .connected])
        // Each reset was a lost link, and each was resumed.
        #expect(try await eventually { alice.linkEvents(of: bob).count >= 6 && LinkRecoveryTests.restored(alice.linkEvents(of: bob)) })
        // Everything was acknowledged: the streams are gone from both members.
        #expect(try await eventually { alice.engine.channelCount(to: bob.peer.identifier) == 0 })
    }

    /// Both directions at once, streams opened before and right after a reset: each arrives once.
    @Test func streamsBothWaysAndOpenedAroundAResetArriveOnce() async throws {
        let (alice, bob) = try await LinkRecoveryTests.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let before = seededContent(2 << 20, seed: 1)
        let back = seededContent(2 << 20, seed: 2)
        let after = seededContent(300_000, seed: 3)
        let first = try alice.engine.openStream(named: "before", to: bob.peer.identifier)
        let reverse = try bob.engine.openStream(named: "back", to: alice.peer.identifier)
        let writingFirst = Self.write(before, to: first)
        let writingBack = Self.write(back, to: reverse)
        try #require(try await eventually { bob.openedStreams.count == 1 && alice.openedStreams.count == 1 })
        let readingFirst = Reading(bob.openedStreams[0])
        let readingBack = Reading(alice.openedStreams[0])
        try #require(try await eventually(seconds: 30) { readingFirst.received.value >= 1 << 20 })
        try await LinkRecoveryTests.resetLinks(alice, bob)
        // Opened while the loss is noticed and the link resumed: on the old link or the new one.
        let late = try alice.engine.openStream(named: "after", to: bob.peer.identifier)
        let writingLate = Self.write(after, to: late)
        try #require(try await eventually(seconds: 30) { bob.openedStreams.count == 2 })
        let readingLate = Reading(bob.openedStreams[1])
        #expect(bob.openedStreams[1].name == "after")
        #expect(try await readingFirst.task.value == before)
        #expect(try await readingBack.task.value == back)
        #expect(try await readingLate.task.value == after)
        for writing in [writingFirst, writingBack, writingLate] { try await withDeadline(seconds: 30) { try await writing.value } }
        #expect(alice.states(of: bob) == [.connecting, .connected] && bob.states(of: alice) == [.connecting, .connected])
    }

    /// A stream finished just before the link went (its end's acknowledgement may be lost):
    /// the reader ends once, with every byte, and the writer's place is given back.
    @Test func aStreamClosedAsTheLinkGoesEndsOnce() async throws {
        let (alice, bob) = try await LinkRecoveryTests.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let content = seededContent(100_000, seed: 4)
        let writer = try alice.engine.openStream(named: "short", to: bob.peer.identifier)
        try await withDeadline(seconds: 30) { try await Self.write(content, to: writer).value }
        try await LinkRecoveryTests.resetLinks(alice, bob)
        try #require(try await eventually { bob.openedStreams.count == 1 })
        let received = try await Reading(bob.openedStreams[0]).task.value
        #expect(received == content)
        #expect(try await eventually { alice.engine.channelCount(to: bob.peer.identifier) == 0 })
        #expect(bob.openedStreams.count == 1)
    }
}
