import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import Synchronization

/// Decides whether a peer may connect: by a CA when given one, else by asking the person (who
/// compares the pairing code with the other screen), else by `--trust-any`. Shows what it knows
/// about the peer either way.
final class TrustPolicy: Sendable {
    let anchors: [Certificate]?
    let trustAny: Bool
    let console: Console
    /// Peers this side turned down, so a command can say so and exit with `untrusted`.
    private let rejected = Mutex<Set<MCPeerID>>([])

    init(anchors: [Certificate]?, trustAny: Bool, console: Console) {
        self.anchors = anchors
        self.trustAny = trustAny
        self.console = console
    }

    var summary: String {
        if let anchors { return "trusting peers certified by \(anchors.map { Terminal.safe($0.subjectCommonName ?? $0.subject) }.joined(separator: ", "))" }
        if trustAny { return "trusting every peer (--trust-any)" }
        return console.canAsk ? "asking you about each peer" : "no way to trust peers: pass --trust-ca or --trust-any"
    }

    /// Whether a person decides about peers (no CA, no --trust-any, a terminal to ask at).
    var asksPerson: Bool { anchors == nil && !trustAny && console.canAsk }

    func wasRejected(_ peer: MCPeerID) -> Bool { rejected.withLock { $0.contains(peer) } }

    func decide(_ request: MCTrustRequest) async -> Bool {
        let accepted = await evaluate(request)
        if !accepted { rejected.withLock { _ = $0.insert(request.peer) } }
        return accepted
    }

    private func evaluate(_ request: MCTrustRequest) async -> Bool {
        let name = Terminal.safe(request.peer.displayName)
        let code = "pairing code \(request.pairingCode)"
        if !request.isEncrypted {
            console.say("the connection to \(name) is not encrypted: anyone on the way can read it, and the pairing code proves nothing")
        }
        guard let chain = request.certificates?.map(\.certificate), let leaf = chain.first else {
            console.say("\(name) has no identity: unauthenticated, anyone could use that name; \(code)")
            if anchors != nil {
                console.say("rejected \(name): --trust-ca needs a certificate")
                return false
            }
            return await confirm(name, question: "accept unauthenticated \(name)? Only if \(name)'s screen shows \(code)")
        }
        // Without a CA nothing checked the issuer: it is only what the certificate claims.
        let issuer = leaf.issuer == leaf.subject ? "self-signed" : "issued by \(Terminal.safe(leaf.issuer))\(anchors == nil ? " (not verified)" : "")"
        console.say("\(name) is \(Terminal.safe(leaf.subject)), \(issuer), SHA-256 \(leaf.sha256FingerprintText); \(code)")
        if let anchors {
            let outcome = TrustEvaluation(anchors: anchors).evaluate(chain)
            guard outcome.isTrusted else {
                console.say("rejected \(name): its certificate does not verify (\(outcome))")
                return false
            }
            // The CA vouches for the common name, not for the display name the peer chose.
            guard leaf.subjectCommonName == request.peer.displayName else {
                console.say("rejected \(name): the CA certified the name \(Terminal.safe(leaf.subjectCommonName ?? "(none)")), not \(name)")
                return false
            }
            console.say("\(name)'s certificate verifies to the trusted CA")
            return true
        }
        return await confirm(name, question: "accept \(name)? Only if \(name)'s screen shows the same \(code)")
    }

    /// Answered before the library's 30 s certificate deadline.
    private func confirm(_ name: String, question: String) async -> Bool {
        if trustAny {
            console.say("accepted \(name) (--trust-any)")
            return true
        }
        guard console.canAsk else {
            console.say("rejected \(name): pass --trust-ca or --trust-any to trust peers without asking")
            return false
        }
        let yes = await console.ask(question, within: 25)
        console.say(yes ? "accepted \(name)" : "rejected \(name)")
        return yes
    }
}
