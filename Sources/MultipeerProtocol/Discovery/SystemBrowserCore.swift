import MultipeerDNS
import MultipeerWire
import NIOCore

/// A service instance as avahi-daemon's browser reports it: on one interface, over one protocol.
package struct SystemServiceKey: Hashable, Sendable {
    package let interfaceIndex: Int
    package let ipv6: Bool
    package let name: String
    package let domain: String

    package init(interfaceIndex: Int, ipv6: Bool, name: String, domain: String) {
        self.interfaceIndex = interfaceIndex
        self.ipv6 = ipv6
        self.name = name
        self.domain = domain
    }
}

/// The system engine's browser, sans-I/O: Avahi browses and caches; this decides which instances
/// to resolve (within the embedded browser's caps) and turns the resolutions into found and lost
/// peers through the same `DiscoveredPeers`, so both engines report alike (docs/PROTOCOL.md §12.3).
package struct SystemBrowserCore {
    package enum Action: Equatable {
        case resolve(SystemServiceKey)
        case stopResolving(SystemServiceKey)
        /// Call `retry(_:)` for the key after this long.
        case retry(SystemServiceKey, after: TimeAmount)
    }

    private struct Resolution: Equatable {
        let address: MDNSAddress
        let port: UInt16
        let txt: [[UInt8]]
        /// Which resolution came last: its TXT is the instance's.
        let sequence: Int
    }

    private struct Instance {
        var resolutions: [SystemServiceKey: Resolution?] = [:]
        let firstSeen: NIODeadline
    }

    package let serviceType: ServiceType
    let limits: MDNSBrowserCore.Limits
    /// Interfaces times two protocols; more keys for one instance are not resolved.
    static let maxKeysPerInstance = 32
    private var instances: [DNSName: Instance] = [:]
    private var retryIntervals: [SystemServiceKey: TimeAmount] = [:]
    private var discovered: DiscoveredPeers
    private var sequence = 0
    private var events: [MDNSBrowserCore.Event] = []

    package init(serviceType: ServiceType, localIdentifier: Bytes16, limits: MDNSBrowserCore.Limits = MDNSBrowserCore.Limits()) {
        self.serviceType = serviceType
        self.limits = limits
        discovered = DiscoveredPeers(localIdentifier: localIdentifier)
    }

    var foundPeers: [MDNSBrowserCore.FoundPeer] { discovered.reported.values.sorted { $0.peer.identifier < $1.peer.identifier } }
    var instanceCount: Int { instances.count }

    private func instanceName(_ key: SystemServiceKey) -> DNSName? {
        guard key.domain == "local" else { return nil }
        return try? serviceType.serviceName.prepending(Array(key.name.utf8))
    }

    package mutating func serviceAdded(_ key: SystemServiceKey, now: NIODeadline) -> [Action] {
        guard let name = instanceName(key) else { return [] }
        var actions: [Action] = []
        if instances[name] == nil {
            if instances.count >= limits.maxInstances {
                // Full: an instance that never resolved to a peer makes way (the embedded rule).
                let reportedNames = Set(discovered.reported.values.map(\.instance))
                guard let stale = instances.first(where: { !reportedNames.contains($0.key) && now - $0.value.firstSeen > .seconds(5) && !$0.value.resolutions.values.contains { $0 != nil } })
                else { return [] }
                actions += forget(stale.key)
            }
            instances[name] = Instance(firstSeen: now)
        }
        guard instances[name]!.resolutions[key] == nil, instances[name]!.resolutions.count < Self.maxKeysPerInstance else { return actions }
        instances[name]!.resolutions[key] = .some(nil)
        return actions + [.resolve(key)]
    }

    package mutating func serviceRemoved(_ key: SystemServiceKey) -> [Action] {
        guard let name = instanceName(key), instances[name]?.resolutions[key] != nil else { return [] }
        instances[name]!.resolutions[key] = nil
        retryIntervals[key] = nil
        if instances[name]!.resolutions.isEmpty { instances[name] = nil }
        reconcile()
        return [.stopResolving(key)]
    }

    package mutating func resolved(_ key: SystemServiceKey, address: MDNSAddress, port: UInt16, txt: [[UInt8]]) {
        guard let name = instanceName(key), instances[name]?.resolutions[key] != nil else { return }
        sequence += 1
        instances[name]!.resolutions[key] = Resolution(address: address, port: port, txt: Array(txt.prefix(256)), sequence: sequence)
        retryIntervals[key] = nil
        reconcile()
    }

    /// Avahi gave up resolving (or the records went): unknown until a retry, backing off from
    /// 1 s to 60 s as the embedded browser's resolve queries do.
    package mutating func resolveFailed(_ key: SystemServiceKey) -> [Action] {
        guard let name = instanceName(key), instances[name]?.resolutions[key] != nil else { return [] }
        instances[name]!.resolutions[key] = .some(nil)
        let interval = retryIntervals[key] ?? .seconds(1)
        retryIntervals[key] = min(interval * 2, .seconds(60))
        reconcile()
        return [.stopResolving(key), .retry(key, after: interval)]
    }

    package mutating func retry(_ key: SystemServiceKey) -> [Action] {
        guard let name = instanceName(key), let resolution = instances[name]?.resolutions[key], resolution == nil else { return [] }
        return [.resolve(key)]
    }

    /// The daemon went away with everything it knew: every found peer is lost. (Its browsers
    /// and resolvers are dead; the shell frees them.)
    package mutating func daemonLost() {
        instances.removeAll()
        retryIntervals.removeAll()
        reconcile()
    }

    /// Forgets everything without events (the browser stopped).
    package mutating func stop() {
        instances.removeAll()
        retryIntervals.removeAll()
        discovered.removeAll()
    }

    package mutating func takeEvents() -> [MDNSBrowserCore.Event] {
        defer { events = [] }
        return events
    }

    private mutating func forget(_ name: DNSName) -> [Action] {
        let keys = instances.removeValue(forKey: name)?.resolutions.keys.map { $0 } ?? []
        for key in keys { retryIntervals[key] = nil }
        return keys.map { .stopResolving($0) }
    }

    private mutating func reconcile() {
        var peers: [DNSName: MDNSBrowserCore.FoundPeer] = [:]
        for (name, instance) in instances {
            let resolved = instance.resolutions.compactMap { key, resolution in resolution.map { (key, $0) } }
            guard let latest = resolved.max(by: { $0.1.sequence < $1.1.sequence }) else { continue }
            let endpoints = resolved.map { key, resolution in
                MDNSBrowserCore.Endpoint(address: resolution.address, port: resolution.port, interfaceIndex: key.interfaceIndex)
            }
            peers[name] = DiscoveredPeers.peer(instance: name, txt: latest.1.txt, endpoints: endpoints)
        }
        events += discovered.update(peers)
    }
}
