import ArgumentParser
import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerDiscovery
import MultipeerProtocol

/// Who this peer is and whom it trusts: the options every command shares.
struct PeerOptions: ParsableArguments {
    @Option(help: "The name other peers see (at most 63 bytes of UTF-8); default: the identity's common name, else the host name.")
    var name: String?

    @Option(help: "The service type peers find each other by (1-15 lowercase letters, digits and hyphens).")
    var service: String = "mp-chat"

    @Option(help: ArgumentHelp("A security identity: PKCS#12 file with the key, certificate and chain.", valueName: "file.p12"))
    var identity: String?

    @Option(help: ArgumentHelp("The file holding the identity's password.", valueName: "file"))
    var passwordFile: String?

    @Option(help: ArgumentHelp("Accept exactly the peers whose certificate chain verifies to this CA (PEM).", valueName: "ca.pem"))
    var trustCa: String?

    @Flag(help: "Accept every peer without asking (shows its fingerprint and pairing code). For scripts on a network you trust.")
    var trustAny = false

    @Option(help: "Encryption: required, optional or none.")
    var encryption: EncryptionChoice = .required

    @Option(help: ArgumentHelp("Discover on these interfaces only (repeatable); default: every multicast interface.", valueName: "name"))
    var interface: [String] = []

    enum EncryptionChoice: String, ExpressibleByArgument, CaseIterable {
        case required, optional, none

        var preference: MCEncryptionPreference {
            switch self {
            case .required: .required
            case .optional: .optional
            case .none: .none
            }
        }
    }

    func validate() throws {
        if identity != nil && passwordFile == nil {
            throw ValidationError("--identity needs --password-file")
        }
        if trustCa != nil && trustAny {
            throw ValidationError("--trust-ca and --trust-any exclude each other")
        }
    }

    /// Both families where the machine has IPv6 (Linux's "::" takes IPv4 too), so that peers
    /// on an IPv6-only link, link-local addresses included, can connect; IPv4 otherwise.
    static let listenHost: String = {
        let probe = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        guard probe >= 0 else { return "0.0.0.0" }
        close(probe)
        return "::"
    }()

    var discovery: DiscoveryConfiguration {
        DiscoveryConfiguration(interfaceNames: interface.isEmpty ? nil : interface)
    }

    /// The identity from `--identity`, nil without one.
    func loadIdentity() throws(AppFailure) -> SecurityIdentity? {
        guard let identity, let passwordFile else { return nil }
        let password: String
        do {
            password = try String(contentsOfFile: passwordFile, encoding: .utf8).trimmingCharacters(in: .newlines)
        } catch {
            throw AppFailure(.setup, "cannot read the password file \(passwordFile): \(error.localizedDescription)")
        }
        do {
            return try SecurityIdentity(pkcs12File: identity, password: password)
        } catch {
            throw AppFailure(.setup, "cannot open the identity \(identity): \(error)")
        }
    }

    /// The anchors from `--trust-ca`, nil without it.
    func loadAnchors() throws(AppFailure) -> [Certificate]? {
        guard let trustCa else { return nil }
        do {
            let anchors = try Certificate.chain(pemEncoded: String(contentsOfFile: trustCa, encoding: .utf8))
            guard !anchors.isEmpty else { throw AppFailure(.setup, "\(trustCa) holds no certificate") }
            return anchors
        } catch let failure as AppFailure {
            throw failure
        } catch {
            throw AppFailure(.setup, "cannot read the CA \(trustCa): \(error)")
        }
    }

    /// The session with its trust policy installed, after a line saying who this peer is.
    /// Off a terminal a trust option is required: nobody could be asked about peers.
    func makeSession(console: Console) throws(AppFailure) -> (MCSession, TrustPolicy) {
        let identity = try loadIdentity()
        guard console.canAsk || trustCa != nil || trustAny else {
            throw AppFailure(.setup, "no terminal to ask about peers: pass --trust-ca or --trust-any")
        }
        let name = name ?? identity?.certificate.subjectCommonName ?? ProcessInfo.processInfo.hostName
        let peerID: MCPeerID
        do {
            peerID = try MCPeerID(validatingDisplayName: name)
        } catch {
            throw AppFailure(.setup, "--name: \(error.reason)")
        }
        let policy = TrustPolicy(anchors: try loadAnchors(), trustAny: trustAny, console: console)
        let session: MCSession
        do {
            var configuration = MCSessionConfiguration()
            configuration.listenAddress = Self.listenHost
            session = try MCSession(peer: peerID, identity: identity, encryptionPreference: encryption.preference, configuration: configuration)
        } catch {
            throw AppFailure(.setup, "cannot make the session: \(error.reason)")
        }
        // Off the network thread: the policy writes to the terminal, which may block (a paused
        // terminal, a full pipe).
        session.setTrustEvaluator { request in await Task.detached { await policy.decide(request) }.value }
        if let identity {
            let certificate = identity.certificate
            console.say("you are \(Terminal.safe(name)): \(Terminal.safe(certificate.subject)), SHA-256 \(certificate.sha256FingerprintText)")
        } else {
            console.say("you are \(Terminal.safe(name)), without an identity: peers will see you as unauthenticated")
        }
        console.say("encryption \(encryption.rawValue); \(policy.summary)")
        return (session, policy)
    }
}
