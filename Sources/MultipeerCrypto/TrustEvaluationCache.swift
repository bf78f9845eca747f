import Foundation
import Synchronization

/// Chains that `TrustEvaluation` found trusted, so a peer that reconnects (mesh members do, often)
/// is not verified again: a chain check costs two signature checks, about a fifth of an
/// establishment. Only successes are kept, keyed by what decided them (the anchors, the chain,
/// the depth and security level), and a hit still requires the evaluation time to lie inside
/// every certificate's validity, anchors included.
package final class TrustEvaluationCache: Sendable {
    /// Entries kept; the oldest goes first. Peers cannot add entries of their own: only chains
    /// that verify to the app's anchors are kept.
    package static let capacity = 256
    package static let shared = TrustEvaluationCache()

    package struct Key: Hashable, Sendable {
        fileprivate let digest: [UInt8]
    }

    private struct Entry: Sendable {
        let validFrom: Date
        let validUntil: Date
    }

    private struct State: Sendable {
        var entries: [Key: Entry] = [:]
        var order: [Key] = []
        var hits = 0
    }

    private let state = Mutex(State())

    package init() {}

    /// SHA-256 over the parameters, the anchors' fingerprints (as a set: their order does not
    /// change the outcome) and the chain's in order, each 32 bytes, so the key is as long as one.
    package static func key(anchors: [Certificate], chain: [Certificate], maximumDepth: Int, securityLevel: Int32) -> Key {
        let hasher = SHA256Hasher()
        var parameters = (Int64(maximumDepth).littleEndian, Int64(securityLevel).littleEndian,
                          Int64(anchors.count).littleEndian, Int64(chain.count).littleEndian)
        withUnsafeBytes(of: &parameters) { hasher.update($0) }
        for fingerprint in anchors.map(\.sha256Fingerprint).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            hasher.update(fingerprint)
        }
        for certificate in chain { hasher.update(certificate.sha256Fingerprint) }
        return Key(digest: hasher.finalize())
    }

    /// Whether `key` was found trusted and `time` lies inside the validity of all it covered.
    package func isTrusted(_ key: Key, at time: Date) -> Bool {
        state.withLock { state in
            guard let entry = state.entries[key], entry.validFrom <= time, time <= entry.validUntil else {
                return false
            }
            state.hits += 1
            return true
        }
    }

    /// Records a trusted outcome; the validity kept is the intersection of every certificate's.
    package func insertTrusted(_ key: Key, anchors: [Certificate], chain: [Certificate]) {
        let certificates = anchors + chain
        guard let validFrom = certificates.map(\.notValidBefore).max(),
              let validUntil = certificates.map(\.notValidAfter).min(), validFrom <= validUntil
        else { return }
        state.withLock { state in
            if state.entries.updateValue(Entry(validFrom: validFrom, validUntil: validUntil), forKey: key) == nil {
                state.order.append(key)
            }
            while state.order.count > Self.capacity {
                state.entries[state.order.removeFirst()] = nil
            }
        }
    }

    package func removeAll() {
        state.withLock { state in
            state.entries.removeAll()
            state.order.removeAll()
        }
    }

    package var count: Int { state.withLock { $0.entries.count } }
    package var hits: Int { state.withLock { $0.hits } }
}
