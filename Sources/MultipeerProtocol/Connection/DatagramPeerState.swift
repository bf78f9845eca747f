import MultipeerCrypto
import MultipeerWire
import NIOCore

/// Which way a datagram key works (docs/PROTOCOL.md §5.1).
package enum DatagramDirection: Sendable, CaseIterable {
    case dialerToListener
    case listenerToDialer

    package var exporterLabel: String {
        switch self {
        case .dialerToListener: "MPCP datagram v1 dialer-to-listener"
        case .listenerToDialer: "MPCP datagram v1 listener-to-dialer"
        }
    }

    /// The epoch as the exporter's context.
    package static func exporterContext(epoch: UInt32) -> [UInt8] {
        withUnsafeBytes(of: epoch.bigEndian) { Array($0) }
    }
}

/// The datagram side of one connection, sans-I/O (docs/PROTOCOL.md §8): counters and epochs for
/// sending, epochs and replay windows for receiving, AEAD with exporter keys when the connection
/// is TLS. Nothing is ever sent in reply; every failure is a silent drop.
package struct DatagramPeerState {
    package enum Received: Equatable {
        case message(ByteBuffer)
        case dropped
        /// Too many datagrams failed to authenticate in one epoch: close the connection.
        case integrityLimitReached
    }

    package struct Limits: Sendable {
        /// Move to the next epoch before a counter reaches this.
        package var epochCounterLimit: UInt64 = WireLimits.datagramEpochCounterLimit
        /// Failed openings in one epoch before the connection is closed.
        package var failureLimit: UInt64 = 1 << 32
        package var replayWindow: Int = ReplayWindow.defaultSize
        package init() {}
    }

    private struct ReceiveEpoch {
        var key: DatagramEpochKey?
        var window: ReplayWindow
        var failures: UInt64 = 0
        /// A previous epoch skipped over: its key is derived when its first datagram arrives, so
        /// no datagram costs more than one derivation.
        var keyPending = false
    }

    /// Derives the key for a direction and epoch; nil on a plaintext connection.
    package typealias KeySource = (DatagramDirection, UInt32) -> SecureBytes?

    package let kind: DatagramHeader.Kind
    /// The peer's receiver ID, written into every datagram we send.
    package let peerReceiverID: UInt32
    private let sendDirection: DatagramDirection
    private let keySource: KeySource
    private let limits: Limits

    private var sendEpoch: UInt32 = 0
    private var sendCounter: UInt64 = 0
    private var sendKey: DatagramEpochKey?

    private var currentEpoch: UInt32 = 0
    private var current: ReceiveEpoch
    private var previous: ReceiveEpoch?
    /// The one later epoch we hold a key for: derived when a datagram of that epoch first arrives,
    /// replaced when one of another later epoch does, so a datagram costs at most one derivation.
    private var candidate: (epoch: UInt32, key: DatagramEpochKey?)?
    /// Failed openings under later epochs, counted together until one opens (§8 rule 2).
    private var laterFailures: UInt64 = 0

    package init(isEncrypted: Bool, weAreDialer: Bool, peerReceiverID: UInt32, limits: Limits = Limits(), keySource: @escaping KeySource) {
        kind = isEncrypted ? .sealed : .plain
        self.peerReceiverID = peerReceiverID
        sendDirection = weAreDialer ? .dialerToListener : .listenerToDialer
        self.keySource = keySource
        self.limits = limits
        let receiveDirection: DatagramDirection = weAreDialer ? .listenerToDialer : .dialerToListener
        sendKey = isEncrypted ? Self.epochKey(keySource, sendDirection, 0) : nil
        current = ReceiveEpoch(key: isEncrypted ? Self.epochKey(keySource, receiveDirection, 0) : nil, window: ReplayWindow(size: limits.replayWindow))
    }

    private var receiveDirection: DatagramDirection {
        sendDirection == .dialerToListener ? .listenerToDialer : .dialerToListener
    }

    /// The whole datagram for `message`, or nil if no key could be derived.
    package mutating func seal(_ message: ByteBuffer) -> ByteBuffer? {
        if sendCounter >= limits.epochCounterLimit {
            guard sendEpoch < UInt32.max else { return nil }
            sendEpoch += 1
            sendCounter = 0
            sendKey = kind == .sealed ? Self.epochKey(keySource, sendDirection, sendEpoch) : nil
        }
        let header = DatagramHeader(kind: kind, receiverID: peerReceiverID, epoch: sendEpoch, counter: sendCounter)
        sendCounter += 1
        switch kind {
        case .sealed:
            guard let sendKey else { return nil }
            return sendKey.seal(message, header: header)
        case .plain:
            var out = ByteBufferAllocator().buffer(capacity: WireLimits.datagramHeaderLength + message.readableBytes)
            header.encode(into: &out)
            out.writeImmutableBuffer(message)
            return out
        }
    }

    /// Authenticates, checks for replay, and moves state only when all passed.
    package mutating func open(header: DatagramHeader, body: ByteBuffer) -> Received {
        guard header.kind == kind else { return .dropped }
        // No sender uses a counter at or past the epoch limit (§8): drop it before any arithmetic.
        guard header.counter < WireLimits.datagramEpochCounterLimit else { return .dropped }
        let epoch = header.epoch
        if epoch == currentEpoch {
            guard current.window.accepts(header.counter) else { return .dropped }
            guard let message = unseal(body, header: header, key: current.key) else {
                return Self.failedOpening(&current.failures, limit: limits.failureLimit)
            }
            current.window.commit(header.counter)
            return .message(message)
        }
        if currentEpoch > 0, epoch == currentEpoch - 1, var old = previous {
            guard old.window.accepts(header.counter) else { return .dropped }
            if old.keyPending {
                old.key = Self.epochKey(keySource, receiveDirection, epoch)
                old.keyPending = false
            }
            guard let message = unseal(body, header: header, key: old.key) else {
                defer { previous = old }
                return Self.failedOpening(&old.failures, limit: limits.failureLimit)
            }
            old.window.commit(header.counter)
            previous = old
            return .message(message)
        }
        // Any later epoch: every datagram of the epochs between may have been lost (§8 rule 2).
        if epoch > currentEpoch {
            if candidate?.epoch != epoch {
                candidate = (epoch, kind == .sealed ? Self.epochKey(keySource, receiveDirection, epoch) : nil)
            }
            guard let message = unseal(body, header: header, key: candidate?.key) else {
                return Self.failedOpening(&laterFailures, limit: limits.failureLimit)
            }
            var window = ReplayWindow(size: limits.replayWindow)
            window.commit(header.counter)
            if epoch == currentEpoch + 1 {
                previous = current
            } else {
                // No datagram of epoch − 1 was accepted (we would have moved to it): a fresh window.
                previous = ReceiveEpoch(key: nil, window: ReplayWindow(size: limits.replayWindow), keyPending: kind == .sealed)
            }
            current = ReceiveEpoch(key: candidate?.key, window: window)
            currentEpoch = epoch
            candidate = nil
            laterFailures = 0
            return .message(message)
        }
        return .dropped
    }

    /// Counts a datagram that did not authenticate; past the limit the connection must close (§8).
    private static func failedOpening(_ failures: inout UInt64, limit: UInt64) -> Received {
        failures += 1
        return failures >= limit ? .integrityLimitReached : .dropped
    }

    private func unseal(_ body: ByteBuffer, header: DatagramHeader, key: DatagramEpochKey?) -> ByteBuffer? {
        switch kind {
        case .plain: return body
        case .sealed: return key?.open(body, header: header)
        }
    }

    /// The epoch's key, its XChaCha20 subkey derived once (`DatagramEpochKey`); nil when none.
    private static func epochKey(_ source: KeySource, _ direction: DatagramDirection, _ epoch: UInt32) -> DatagramEpochKey? {
        source(direction, epoch).map { DatagramEpochKey(key: $0, epoch: epoch) }
    }
}
