import CMultipeerOpenSSL
import Foundation
import Synchronization

/// Chains that `TrustEvaluation` found trusted, so a peer that reconnects (mesh members do, often)
/// is not verified again: a chain check costs two signature checks, about a fifth of an
/// establishment. Only successes are kept, keyed by what decided them (the anchors, the chain,
/// the depth and security level), and only when every certificate given, anchors included, is
/// valid at the evaluation time; a hit requires the same of its own time. With every candidate
/// valid at both times, OpenSSL would build the same path again.
package final class TrustEvaluationCache: Sendable {
    /// Entries kept; the oldest goes first. Peers cannot add entries of their own: only chains
    /// that verify to the app's anchors are kept.
    package static let capacity = 256
    package static let shared = TrustEvaluationCache()

    package struct Key: Hashable, Sendable {
        fileprivate let digest: [UInt8]
    }

    /// Whole seconds, as OpenSSL compares them: valid from `validFrom` on, and before `validUntil`.
    private struct Entry: Sendable {
        let validFrom: time_t
        let validUntil: time_t
    }

    private struct State: Sendable {
        var entries: [Key: Entry] = [:]
        var order: [Key] = []
        var hits = 0
    }

    private let state = Mutex(State())

    package init() {}

    /// SHA-256 over the parameters, the anchors' fingerprints (sorted, so that listing the same
    /// anchors in another order finds the entry) and the chain's in order, each 32 bytes. Nil
    /// when OpenSSL cannot compute one: the chain is then verified uncached.
    package static func key(anchors: [Certificate], chain: [Certificate], maximumDepth: Int, securityLevel: Int32) -> Key? {
        var anchorPrints: [[UInt8]] = []
        var chainPrints: [[UInt8]] = []
        for anchor in anchors {
            guard let print = anchor.checkedSHA256Fingerprint else { return nil }
            anchorPrints.append(print)
        }
        for certificate in chain {
            guard let print = certificate.checkedSHA256Fingerprint else { return nil }
            chainPrints.append(print)
        }
        var input: [UInt8] = []
        for parameter in [Int64(maximumDepth), Int64(securityLevel), Int64(anchors.count), Int64(chain.count)] {
            withUnsafeBytes(of: parameter.littleEndian) { input.append(contentsOf: $0) }
        }
        for print in anchorPrints.sorted(by: { $0.lexicographicallyPrecedes($1) }) { input += print }
        for print in chainPrints { input += print }
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        guard EVP_Digest(input, input.count, &digest, &length, FetchedAlgorithms.sha256, nil) == 1, length == 32 else {
            OpenSSLErrors.clear()
            return nil
        }
        return Key(digest: digest)
    }

    /// Whether `key` was found trusted and `seconds` lies inside the validity of all it covered.
    package func isTrusted(_ key: Key, at seconds: time_t) -> Bool {
        state.withLock { state in
            guard let entry = state.entries[key], entry.validFrom <= seconds, seconds < entry.validUntil else {
                return false
            }
            state.hits += 1
            return true
        }
    }

    /// Records a trusted outcome at `seconds`, if every certificate given was valid then; the
    /// validity kept is the intersection of theirs. The oldest entry goes when full; a hit does
    /// not make an entry younger.
    package func insertTrusted(_ key: Key, anchors: [Certificate], chain: [Certificate], at seconds: time_t) {
        let certificates = anchors + chain
        let froms = certificates.compactMap(\.notValidBefore.timeT)
        let untils = certificates.compactMap(\.notValidAfter.timeT)
        guard froms.count == certificates.count, untils.count == certificates.count,
              let validFrom = froms.max(), let validUntil = untils.min(), validFrom <= seconds, seconds < validUntil
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
