import MultipeerWire
import NIOCore

/// The system engine's advertiser, sans-I/O: what to publish through avahi-daemon, the same
/// renaming on a collision as the embedded responder (`InstanceNaming`), and what to do when the
/// daemon comes and goes, and which interfaces to publish on as they come and go. Avahi itself
/// probes, announces, answers and says goodbye.
package struct SystemAdvertiserCore {
    package enum Action: Equatable {
        /// Withdraw everything published (Avahi: reset every entry group).
        case withdraw
        /// Withdraw what is published on these interfaces only (Avahi: free their entry groups).
        case withdrawFrom(interfaceIndexes: [Int])
        /// Publish on `publication.interfaces` (Avahi: one entry group per interface, so that
        /// one can come or go without touching the others).
        case publish(SystemPublication)
        /// Call `wake()` after this long.
        case wake(after: TimeAmount)
    }

    package typealias Event = MDNSAdvertiserCore.Event

    private var naming: InstanceNaming
    private let port: UInt16
    private let txt: [[UInt8]]
    private var interfaces: [MDNSInterface]
    private var daemonRunning = false
    /// Published (or being probed) under the current names, on every interface in `interfaces`.
    private var published = false
    /// `announced` was reported for the current names: once, as the embedded core does, however
    /// many interfaces' groups Avahi establishes.
    private var announced = false
    /// A rename is waiting out the conflict throttle.
    private var deferred = false
    private var events: [Event] = []

    package init(serviceType: ServiceType, peer: WirePeerID, port: UInt16, discoveryInfo: [String: String], interfaces: [MDNSInterface]) throws(DiscoveryError) {
        naming = InstanceNaming(serviceType: serviceType, peer: peer)
        self.port = port
        self.interfaces = interfaces
        txt = try DiscoveryTXT.encode(peer, info: discoveryInfo)
    }

    package var publication: SystemPublication { publication(on: interfaces) }

    private func publication(on interfaces: [MDNSInterface]) -> SystemPublication {
        SystemPublication(
            instanceLabel: naming.instanceLabel, serviceType: "_\(naming.serviceType.name)._tcp", hostName: "\(naming.hostLabel).local",
            port: port, txt: txt, interfaces: interfaces)
    }

    /// The daemon runs (at start, or back after it went away or re-registered its host name).
    package mutating func daemonRan() -> [Action] {
        daemonRunning = true
        guard !published, !deferred else { return [] }
        published = true
        announced = false
        return [.publish(publication)]
    }

    /// The daemon is re-registering its own host name: Avahi wants entries withdrawn until it runs again.
    package mutating func daemonRegistering() -> [Action] {
        daemonRunning = false
        guard published else { return [] }
        published = false
        return [.withdraw]
    }

    /// The daemon went away, and what was published with it.
    package mutating func daemonLost() {
        daemonRunning = false
        published = false
    }

    /// Avahi probed and announced the records.
    package mutating func established() {
        guard published, !announced else { return }
        announced = true
        events.append(.announced)
    }

    /// The interfaces were listed again (`MDNSInterfaces.current`). Those gone or changed (name or
    /// addresses; not subnets alone) are withdrawn; those new or changed are published under the
    /// names held, so the others keep their records and nothing is renamed.
    package mutating func updateInterfaces(_ updated: [MDNSInterface]) -> [Action] {
        let old = interfaces
        interfaces = updated
        var actions: [Action] = []
        let stale = old.filter { gone in !updated.contains { $0.isSameForPublishing(as: gone) } }.map(\.index)
        if !stale.isEmpty { actions.append(.withdrawFrom(interfaceIndexes: stale)) }
        // Unpublished (daemon away, or a rename waiting): the next publish takes the new list.
        let fresh = updated.filter { new in !old.contains { $0.isSameForPublishing(as: new) } }
        if published, !fresh.isEmpty { actions.append(.publish(publication(on: fresh))) }
        return actions
    }

    /// Another host holds one of our names: move to the next ones, as the embedded core does.
    package mutating func collision(now: NIODeadline) -> [Action] {
        guard published else { return [] }
        let delay = naming.rename(now: now)
        events.append(.renamed(naming.instanceName))
        announced = false
        guard delay == .zero else {
            published = false
            deferred = true
            return [.withdraw, .wake(after: delay)]
        }
        return [.withdraw, .publish(publication)]
    }

    /// The conflict throttle's wait is over.
    package mutating func wake() -> [Action] {
        guard deferred else { return [] }
        deferred = false
        return daemonRunning ? daemonRan() : []
    }

    package mutating func takeEvents() -> [Event] {
        defer { events = [] }
        return events
    }
}
