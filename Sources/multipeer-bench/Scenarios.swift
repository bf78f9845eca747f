import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import Synchronization

/// Two or more real sessions in this process, over loopback, driven through the public API.
struct SessionPair {
    let a: MCSession
    let b: MCSession
    let aEvents: MCSession.Events
    let bEvents: MCSession.Events

    /// With `threads`, a (the receiver in the scenarios) and b (the sender) each run on threads of
    /// their own, whose CPU time `SideCPU` reads.
    static func connect(preference: MCEncryptionPreference, identities: (SecurityIdentity, SecurityIdentity)?,
                        threads: (receiver: SideThreads, sender: SideThreads)? = nil) async throws -> SessionPair {
        let a = makeSession("a", preference: preference, identity: identities?.0, configuration: threads?.receiver.configuration ?? .loopbackOnly)
        let b = makeSession("b", preference: preference, identity: identities?.1, configuration: threads?.sender.configuration ?? .loopbackOnly)
        let pair = SessionPair(a: a, b: b, aEvents: a.events(), bEvents: b.events())
        b.connectPeer(a.myPeerID, withNearbyConnectionData: try await a.nearbyConnectionData(forPeer: b.myPeerID))
        try await waitUntil { a.connectedPeers.count == 1 && b.connectedPeers.count == 1 }
        return pair
    }

    func close() async {
        await a.disconnectAndWait()
        await b.disconnectAndWait()
    }
}

func makeSession(_ name: String, preference: MCEncryptionPreference, identity: SecurityIdentity?,
                 configuration: MCSessionConfiguration = .loopbackOnly) -> MCSession {
    MCSession(peer: MCPeerID(displayName: name), securityIdentity: identity.map { [SecIdentity($0)] },
              encryptionPreference: preference, configuration: configuration)
}

struct BenchTimeout: Error, CustomStringConvertible {
    var description: String { "a benchmark step did not finish within 60 s" }
}

func waitUntil(seconds: Double = 60, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while !condition() {
        guard ContinuousClock.now < deadline else { throw BenchTimeout() }
        try await Task.sleep(for: .milliseconds(1))
    }
}

/// Counts what one side receives, from its event stream, on a task of its own.
final class ReceiveCounter: Sendable {
    private let state = Mutex<(messages: Int, bytes: Int, seen: [UInt64], duplicates: Int, lastArrival: ContinuousClock.Instant?)>(
        (0, 0, [], 0, nil))
    /// A task waiting for a byte count (`waitFor(bytes:)`), resumed by the counting task.
    private let waiter = Mutex<(target: Int, continuation: CheckedContinuation<Void, any Error>)?>(nil)

    /// Counts on a task of its own, on `executor` when one is given (a session's network thread).
    /// With `distinctIndices`, every message must start with its index below it (a little-endian
    /// UInt64): a second arrival of an index, or a message without a valid one, is a duplicate.
    /// One bit per index keeps the check as cheap as the raw UDP receiver's counting.
    init(_ events: MCSession.Events, distinctIndices: Int? = nil, executor: (any TaskExecutor)? = nil) {
        if let distinctIndices { state.withLock { $0.seen = Array(repeating: 0, count: (distinctIndices + 63) / 64) } }
        Task(executorPreference: executor) { [self] in
            for await event in events {
                guard case .dataReceived(let data, _) = event else { continue }
                let bytes = state.withLock { state in
                    state.messages += 1
                    state.bytes += data.count
                    state.lastArrival = ContinuousClock.now
                    if let distinctIndices { Self.check(data, distinctIndices, &state.seen, &state.duplicates) }
                    return state.bytes
                }
                wake(at: bytes)
            }
        }
    }

    private static func check(_ data: Data, _ distinctIndices: Int, _ seen: inout [UInt64], _ duplicates: inout Int) {
        let index = data.count >= 8 ? data.withUnsafeBytes { Int(truncatingIfNeeded: $0.loadUnaligned(as: UInt64.self)) } : -1
        guard index >= 0, index < distinctIndices else { return duplicates += 1 }
        let bit: UInt64 = 1 << (index % 64)
        if seen[index / 64] & bit != 0 { duplicates += 1 }
        seen[index / 64] |= bit
    }

    private func wake(at bytes: Int) {
        let ready = waiter.withLock { waiter -> CheckedContinuation<Void, any Error>? in
            guard let (target, continuation) = waiter, bytes >= target else { return nil }
            waiter = nil
            return continuation
        }
        ready?.resume()
    }

    /// Returns once `bytes` have been counted; one waiter at a time. `watch` ends it with an error.
    func waitFor(bytes target: Int) async throws {
        if bytes >= target { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            waiter.withLock { $0 = (target, continuation) }
            // Counted meanwhile: not woken by the counting task.
            wake(at: self.bytes)
        }
    }

    /// Fails a waiter once nothing has arrived for `seconds`; runs until cancelled.
    func watch(seconds: Int = 60) -> Task<Void, Never> {
        Task {
            var last = -1
            var still = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let now = bytes
                still = now == last ? still + 1 : 0
                last = now
                guard still >= seconds else { continue }
                waiter.withLock { waiter in
                    waiter?.continuation.resume(throwing: BenchTimeout())
                    waiter = nil
                }
            }
        }
    }

    var messages: Int { state.withLock { $0.messages } }
    var bytes: Int { state.withLock { $0.bytes } }
    var duplicates: Int { state.withLock { $0.duplicates } }
    var lastArrival: ContinuousClock.Instant? { state.withLock { $0.lastArrival } }
}

/// Counts the messages a session's delegate is given.
final class DelegateCounter: MCSessionDelegate, Sendable {
    private let received = Atomic<Int>(0)

    var messages: Int { received.load(ordering: .relaxed) }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        received.add(1, ordering: .relaxed)
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {}
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
                 with progress: Progress) {}
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
                 at localURL: URL?, withError error: (any Error)?) {}
}

enum Scenarios {
    /// Bytes per second of 1 MiB reliable messages, with at most `window` bytes in flight, and the
    /// peak resident memory growth while sending.
    /// Each side's work runs on its network thread: b sends from a task that prefers its task
    /// executor, a counts on its own.
    static func bulk(_ pair: SessionPair, bytes: Int, window: Int = 8 << 20) async throws -> (rate: Double, peakKiB: Int) {
        let counter = ReceiveCounter(pair.aEvents, executor: pair.a.taskExecutor)
        let watchdog = counter.watch()
        defer { watchdog.cancel() }
        let message = Data(repeating: 0x5A, count: 1 << 20)
        let (a, b) = (pair.a, pair.b)
        let before = Memory.residentKiB
        Memory.resetPeak()
        let elapsed = try await Clock.seconds {
            try await Task(executorPreference: b.taskExecutor) {
                var sent = 0
                while sent < bytes {
                    try await counter.waitFor(bytes: sent + message.count - window)
                    // The send that waits for room: on the network thread, a loop that never
                    // suspends would not let it read the acknowledgements that give the send
                    // queue its room back (docs/PROTOCOL.md §7.9).
                    try await b.send(message, to: [a.myPeerID])
                    sent += message.count
                }
                try await counter.waitFor(bytes: bytes)
            }.value
        }
        return (Double(bytes) / elapsed, max(0, Memory.peakResidentKiB - before))
    }

    /// Reliable small messages per second, pipelined with at most `window` outstanding.
    static func smallMessages(_ pair: SessionPair, count: Int, size: Int = 64, window: Int = 2_000) async throws -> Double {
        let counter = ReceiveCounter(pair.aEvents)
        let message = Data(repeating: 1, count: size)
        let elapsed = try await Clock.seconds {
            for sent in 0..<count {
                if sent - counter.messages >= window { try await waitUntil { sent - counter.messages < window / 2 } }
                try pair.b.send(message, toPeers: [pair.a.myPeerID], with: .reliable)
            }
            try await waitUntil { counter.messages >= count }
        }
        return Double(count) / elapsed
    }

    /// The same, taken by an Apple-style `MCSessionDelegate` on its queue instead of `events()`:
    /// what code ported from Apple's framework sees.
    static func smallMessagesToDelegate(count: Int, size: Int = 64, window: Int = 2_000,
                                        identities: (SecurityIdentity, SecurityIdentity)) async throws -> Double {
        let a = makeSession("a", preference: .required, identity: identities.0)
        let b = makeSession("b", preference: .required, identity: identities.1)
        let counter = DelegateCounter()
        a.delegate = counter
        b.connectPeer(a.myPeerID, withNearbyConnectionData: try await a.nearbyConnectionData(forPeer: b.myPeerID))
        try await waitUntil { a.connectedPeers.count == 1 && b.connectedPeers.count == 1 }
        let message = Data(repeating: 1, count: size)
        let elapsed = try await Clock.seconds {
            for sent in 0..<count {
                if sent - counter.messages >= window { try await waitUntil { sent - counter.messages < window / 2 } }
                try b.send(message, toPeers: [a.myPeerID], with: .reliable)
            }
            try await waitUntil { counter.messages >= count }
        }
        await a.disconnectAndWait()
        await b.disconnectAndWait()
        return Double(count) / elapsed
    }

    /// Datagrams delivered per second, the fraction lost, and duplicates seen.
    /// With `onNetworkThread`, the receiving side takes its events on its session's network thread.
    static func datagrams(_ pair: SessionPair, count: Int, size: Int, onNetworkThread: Bool = false) async throws -> (rate: Double, loss: Double, duplicates: Int) {
        let counter = ReceiveCounter(pair.aEvents, distinctIndices: count, executor: onNetworkThread ? pair.a.taskExecutor : nil)
        let start = ContinuousClock.now
        for index in 0..<count {
            var message = Data(repeating: 0, count: size)
            withUnsafeBytes(of: UInt64(index)) { message.replaceSubrange(0..<8, with: $0) }
            try pair.b.send(message, toPeers: [pair.a.myPeerID], with: .unreliable)
            if index % 256 == 255 { await Task.yield() }
        }
        // Wait until nothing more arrives for 200 ms; the rate counts up to the last arrival.
        var last = -1
        while counter.messages != last {
            last = counter.messages
            try await Task.sleep(for: .milliseconds(200))
        }
        let elapsed = Baselines.seconds((counter.lastArrival ?? start) - start)
        let delivered = counter.messages
        return (Double(delivered) / max(elapsed, 1e-6), 1 - Double(delivered) / Double(count), counter.duplicates)
    }

    /// Sessions established per second: connection data, connect, mutual TLS, both trust
    /// callbacks (each verifying the peer's chain), until both sides report connected. The wait
    /// follows the event streams, so no polling interval is counted.
    /// `firstContact`: the trust evaluations' cache is emptied before each, so both chains are
    /// verified as for a peer never seen; otherwise the peers reconnect as mesh members do, and
    /// their chains are remembered after the first.
    static func establishments(count: Int, identities: (SecurityIdentity, SecurityIdentity), anchor: Certificate,
                               firstContact: Bool = false) async throws -> Double {
        var total = 0.0
        for _ in 0..<count {
            if firstContact { TrustEvaluationCache.shared.removeAll() }
            let a = makeSession("a", preference: .required, identity: identities.0)
            let b = makeSession("b", preference: .required, identity: identities.1)
            for session in [a, b] {
                session.setCertificateEvaluator { _, certificates in
                    TrustEvaluation(anchors: [anchor]).evaluate(certificates?.map(\.certificate) ?? []).isTrusted
                }
            }
            let aEvents = a.events()
            let bEvents = b.events()
            let data = try await a.nearbyConnectionData(forPeer: b.myPeerID)
            total += try await Clock.seconds {
                b.connectPeer(a.myPeerID, withNearbyConnectionData: data)
                try await waitForConnection(aEvents)
                try await waitForConnection(bEvents)
            }
            await a.disconnectAndWait()
            await b.disconnectAndWait()
        }
        return Double(count) / total
    }

    private static func waitForConnection(_ events: MCSession.Events) async throws {
        for await event in events {
            switch event {
            case .peerStateChanged(_, .connected): return
            case .connectionFailed, .connectionRefused: throw BenchTimeout()
            default: continue
            }
        }
        throw BenchTimeout()
    }

    /// Seconds until 8 sessions form a full mesh when 7 join one of them at once.
    static func meshFormation(identities: [SecurityIdentity]) async throws -> Double {
        let hub = makeSession("hub", preference: .required, identity: identities[0])
        let members = (1..<8).map { makeSession("m\($0)", preference: .required, identity: identities[$0]) }
        var blobs: [Data] = []
        for member in members { blobs.append(try await hub.nearbyConnectionData(forPeer: member.myPeerID)) }
        let everyone = [hub] + members
        let elapsed = try await Clock.seconds {
            for (member, blob) in zip(members, blobs) { member.connectPeer(hub.myPeerID, withNearbyConnectionData: blob) }
            try await waitUntil { everyone.allSatisfy { $0.connectedPeers.count == 7 } }
        }
        for session in everyone { await session.disconnectAndWait() }
        return elapsed
    }

    /// Memory per connected idle peer, as live heap growth and as resident-set growth (both ends
    /// of each connection live in this process). Kernel socket buffers are in neither.
    static func idlePeerMemory(identities: [SecurityIdentity]) async throws -> (heapKiB: Double, residentKiB: Double) {
        let residentBefore = Memory.residentKiB
        let heapBefore = Memory.heapInUseBytes
        let hub = makeSession("hub", preference: .required, identity: identities[0])
        let members = (1..<8).map { makeSession("m\($0)", preference: .required, identity: identities[$0]) }
        for member in members {
            member.connectPeer(hub.myPeerID, withNearbyConnectionData: try await hub.nearbyConnectionData(forPeer: member.myPeerID))
        }
        let everyone = [hub] + members
        try await waitUntil { everyone.allSatisfy { $0.connectedPeers.count == 7 } }
        try await Task.sleep(for: .milliseconds(300))
        let heapAfter = Memory.heapInUseBytes
        let residentAfter = Memory.residentKiB
        for session in everyone { await session.disconnectAndWait() }
        // 8 sessions, 28 connections, 56 connection ends: each end is one "connected peer" of a session.
        return (Double(heapAfter - heapBefore) / 1024 / 56, Double(residentAfter - residentBefore) / 56)
    }
}

// MARK: Round trips

/// Sends probes and waits for their echoes, until `samples` were sent or `stop` says so; returns
/// the round-trip times in microseconds of the probes that were not lost. Ends early when the
/// peer goes or the task is cancelled (by the watchdog).
func measureProbes(_ session: MCSession, _ events: MCSession.Events, to peer: MCPeerID, samples: Int,
                   mode: MCSessionSendDataMode, outstanding: OutstandingProbe, warmUp: Int = 0,
                   stop: @Sendable () -> Bool = { false }) async -> [Double] {
    var times: [Double] = []
    var iterator = events.makeAsyncIterator()
    // The first `warmUp` probes go uncounted.
    probing: for index in -warmUp..<samples where !stop() {
        let probe = withUnsafeBytes(of: Int64(index)) { Data($0) } + Data(repeating: 0, count: 56)
        let start = ContinuousClock.now
        outstanding.sent(probe, at: start)
        guard (try? session.send(probe, toPeers: [peer], with: mode)) != nil else { break }
        while let event = await iterator.next(isolation: #isolation) {
            switch event {
            case .dataReceived(let data, _) where data == probe:
                if !outstanding.answered(), index >= 0 { times.append(Baselines.seconds(ContinuousClock.now - start) * 1e6) }
                continue probing
            case .peerStateChanged(_, .notConnected):
                break probing
            default:
                continue
            }
        }
        break  // cancelled by the watchdog
    }
    return times
}

/// The probe in flight, shared with a watchdog that re-sends a lost unreliable probe (the sample
/// then counts as lost), and stops the measurement when too many are lost or one waits too long.
final class OutstandingProbe: Sendable {
    private let state = Mutex<(probe: Data?, firstSentAt: ContinuousClock.Instant, sentAt: ContinuousClock.Instant, resent: Bool, lost: Int)>(
        (nil, .now, .now, false, 0))

    func sent(_ probe: Data, at instant: ContinuousClock.Instant) {
        state.withLock { $0 = (probe, instant, instant, false, $0.lost) }
    }

    /// Marks the probe answered; true if it had been lost and re-sent.
    func answered() -> Bool {
        state.withLock { state in
            defer { state.probe = nil }
            return state.resent
        }
    }

    enum Verdict {
        case wait
        case resend(Data)
        case giveUp
    }

    /// What to do about the probe in flight: re-send an unreliable one that waited longer than
    /// `timeout` (a reliable one is never lost, only slow), and give up past `deadline` or after
    /// more than `maximumLost` lost probes.
    func check(timeout: Duration, deadline: Duration, reliable: Bool, maximumLost: Int) -> Verdict {
        state.withLock { state in
            guard let probe = state.probe else { return .wait }
            let now = ContinuousClock.now
            if now - state.firstSentAt > deadline { return .giveUp }
            guard !reliable, now - state.sentAt > timeout else { return .wait }
            if !state.resent { state.lost += 1 }
            state.resent = true
            state.sentAt = now
            return state.lost > maximumLost ? .giveUp : .resend(probe)
        }
    }
}

extension Scenarios {
    /// Round trips of 64 B probes, each sent by one task that then awaits its echo in the same
    /// loop (as swift-nio-ssl's bench does), while a task on the other side echoes. Both tasks are
    /// ordinary ones, or with `onNetworkThreads` prefer their sessions' task executors: the latency
    /// an application gets when it takes events and sends on the network thread itself.
    static func roundTrips(_ pair: SessionPair, samples: Int, mode: MCSessionSendDataMode, onNetworkThreads: Bool) async -> [Double] {
        let a = pair.a
        let bPeer = pair.b.myPeerID
        let aEvents = pair.aEvents
        let echoing = Task(executorPreference: onNetworkThreads ? a.taskExecutor : nil) {
            for await event in aEvents {
                if case .dataReceived(let data, _) = event { try? a.send(data, toPeers: [bPeer], with: mode) }
            }
        }
        defer { echoing.cancel() }
        return await probe(from: pair.b, pair.bEvents, to: a.myPeerID, samples: samples, mode: mode,
                           executor: onNetworkThreads ? pair.b.taskExecutor : nil, warmUp: roundTripWarmUp)
    }

    /// Round trips made before any is counted: the first after connecting are slower (cold
    /// caches, threads waking for the first time) and would weigh on a short run's median. The
    /// same number as nio-ssl-bench's.
    static let roundTripWarmUp = 50

    /// Runs `measureProbes` on a task (on `executor` when given) beside a watchdog, so that no
    /// probe is waited for more than 5 s and lost unreliable ones are sent again.
    static func probe(from session: MCSession, _ events: MCSession.Events, to peer: MCPeerID, samples: Int,
                      mode: MCSessionSendDataMode, executor: (any TaskExecutor)?, warmUp: Int = 0,
                      stop: @escaping @Sendable () -> Bool = { false }) async -> [Double] {
        let outstanding = OutstandingProbe()
        let measuring = Task(executorPreference: executor) {
            await measureProbes(session, events, to: peer, samples: samples, mode: mode, outstanding: outstanding, warmUp: warmUp, stop: stop)
        }
        let watchdog = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(50))
                switch outstanding.check(timeout: .milliseconds(200), deadline: .seconds(5), reliable: mode == .reliable, maximumLost: samples / 10) {
                case .wait: continue
                case .resend(let probe): try? session.send(probe, toPeers: [peer], with: mode)
                case .giveUp:
                    measuring.cancel()
                    return
                }
            }
        }
        defer { watchdog.cancel() }
        return await measuring.value
    }
}
