import Foundation
import Logging
import MultipeerConnectivity
import MultipeerDiscovery
import MultipeerProtocol

/// Discovery in a process of its own, for tests that run it inside network namespaces and kill it.
/// MULTIPEER_DISCOVERY_ENGINE (automatic, embedded or system) picks the engine; a line
/// `ENGINE <engine>` says which one started. INTERFACE may name several, comma-separated.
extension Demo {
    /// Advertises NAME for SERVICE on INTERFACE until a line `stop` (goodbye, then exit) or the
    /// end of standard input. Prints `ADVERTISING <identifier> <port>`, then `INSTANCE <label>`
    /// each time it announces its instance name and `RENAMED <label>` when a name conflict moves
    /// it to another (docs/PROTOCOL.md §12.1). The peer identifier is random, unless
    /// MULTIPEER_PEER_IDENTIFIER gives one (32 hex digits), so that tests can make two
    /// advertisers claim the same peer.
    static func advertise(name: String, service: String, interface: String, info: [String: String]) async throws {
        let peer = try fixedPeer(name: name) ?? MCPeerID(displayName: name)
        let advertiser = try MCNearbyServiceAdvertiser(
            peer: peer, discoveryInfo: info, serviceType: service, configuration: configuration(interface: interface))
        try await advertiser.start()
        emit("ADVERTISING \(hex(peer)) \(advertiser.port ?? 0)")
        _ = readLine()
        await advertiser.stop()
        emit("STOPPED")
    }

    /// Browses for SERVICE on INTERFACE until standard input ends. Prints
    /// `FOUND <identifier> <display name> <key=value,...> <host:port,...>` (IPv6 as
    /// `[address%interface]:port`) and `LOST <identifier>`.
    static func browse(service: String, interface: String) async throws {
        var configuration = configuration(interface: interface)
        // Tests shorten the wait for a peer that vanished without a goodbye.
        if let seconds = ProcessInfo.processInfo.environment["MULTIPEER_LIVENESS_SECONDS"].flatMap(Int64.init) {
            configuration.livenessTimeout = .seconds(seconds)
        }
        let browser = try MCNearbyServiceBrowser(peer: MCPeerID(displayName: "browser"), serviceType: service, configuration: configuration)
        let events = browser.events()
        try await browser.start()
        emit("BROWSING")
        let watcher = Task {
            for await event in events {
                switch event {
                case .found(let peer, let info, let endpoints):
                    let pairs = info.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
                    emit("FOUND \(hex(peer)) \(peer.displayName) \(pairs.isEmpty ? "-" : pairs) \(endpoints.map(text).joined(separator: ","))")
                case .lost(let peer):
                    emit("LOST \(hex(peer))")
                }
            }
        }
        // Blocks a thread of its own, not the cooperative pool the watcher runs on.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                while readLine() != nil {}
                done.resume()
            }
        }
        watcher.cancel()
        await browser.stop()
    }

    /// The peer MULTIPEER_PEER_IDENTIFIER names, if set; through MCPeerID's Codable form, which
    /// (unlike its initializers) takes an identifier.
    private static func fixedPeer(name: String) throws -> MCPeerID? {
        guard let identifier = ProcessInfo.processInfo.environment["MULTIPEER_PEER_IDENTIFIER"] else { return nil }
        guard identifier.count == 32, identifier.allSatisfy(\.isHexDigit) else { fail("MULTIPEER_PEER_IDENTIFIER: 32 hex digits") }
        let json = try JSONSerialization.data(withJSONObject: ["identifier": identifier.lowercased(), "displayName": name])
        return try JSONDecoder().decode(MCPeerID.self, from: json)
    }

    private static func configuration(interface: String) -> DiscoveryConfiguration {
        var configuration = DiscoveryConfiguration(interfaceNames: interface.split(separator: ",").map(String.init), logger: Logger(label: "discovery", factory: { _ in EngineLine() }))
        if let name = ProcessInfo.processInfo.environment["MULTIPEER_DISCOVERY_ENGINE"] {
            guard let engine = DiscoveryEngine(name: name) else { fail("MULTIPEER_DISCOVERY_ENGINE: automatic, embedded or system") }
            configuration.engine = engine
        }
        return configuration
    }

    /// `host:port`, or `[host%interface]:port` for IPv6 (the interface a link-local address needs).
    private static func text(_ endpoint: MCNearbyServiceBrowser.Endpoint) -> String {
        guard endpoint.host.contains(":") else { return "\(endpoint.host):\(endpoint.port)" }
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        let scope = if_indextoname(UInt32(endpoint.interfaceIndex), &name) != nil ? String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "\(endpoint.interfaceIndex)"
        return "[\(endpoint.host)%\(scope)]:\(endpoint.port)"
    }

    /// The peer's 16-byte identifier in hex: bytes 1-16 of its wire representation (docs/PROTOCOL.md §9.1).
    private static func hex(_ peer: MCPeerID) -> String {
        peer.wireRepresentation.dropFirst().prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    fileprivate static func emit(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}

/// Prints `ENGINE <engine>` when discovery reports the engine it started on, and `INSTANCE` or
/// `RENAMED <label>` when an advertiser announces or renames; drops the rest.
private struct EngineLine: LogHandler {
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        if let engine = event.metadata?["engine"] { Demo.emit("ENGINE \(engine)") }
        if let label = event.metadata?["instance"] {
            Demo.emit("\(event.metadata?["advertiser"] == "renamed" ? "RENAMED" : "INSTANCE") \(label)")
        }
    }
}
