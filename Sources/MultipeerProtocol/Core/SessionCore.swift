import Logging
import MultipeerCrypto
import MultipeerWire
import NIOCore

/// Every decision of a session, sans-I/O (docs/PROTOCOL.md §7): admission of dialers (tokens,
/// introductions, the duplicate-connection rule, the member limit), mesh planning and its retries,
/// which link carries a peer, reassembly and datagram routing, and what the app is told.
/// Inputs are API commands, connection events, decoded frames and datagrams, each with the time;
/// outputs are `SessionAction`s, handed out by `forEachAction` after every input. Randomness is
/// injected; nothing here touches a socket, a clock or a thread.
package final class SessionCore {
    package final class Link {
        let dialed: Bool
        /// A dial whose TCP connection is up (`dialConnected`).
        var transportUp = false
        /// The endpoint that took a dial's TCP connection.
        var dialedEndpoint: WireEndpoint?
        /// When a resumption dial began.
        var dialStarted: NIODeadline?
        /// The interface of the peer's IPv6 link-local address, once established.
        var remoteScope: UInt32?
        /// Our own address on the connection, once established.
        var localHost: String?
        var peer: WirePeerID?
        var plan: DialPlan?
        var attempt = 0
        var isConnected = false
        /// Where the peer accepts connections, for introducing it to others.
        var listenEndpoint: WireEndpoint?
        /// Set when its end must not be reported (a superseded duplicate).
        var closingSilently = false
        var receiverID: UInt32 = 0
        // Exclusivity unchecked: mutated for every message and datagram, on the engine's loop,
        // by code that does not call back into the core.
        @exclusivity(unchecked) var assembler = MessageAssembler()
        @exclusivity(unchecked) var datagram: DatagramPeerState?
        var datagramAddress: SocketAddress?
        /// Streams and resources, once the peer is a member.
        @exclusivity(unchecked) var channels: ChannelMux?
        /// The member's session beyond this link (version 2 over TLS, docs/PROTOCOL.md §7.9).
        @exclusivity(unchecked) var member: RecoverableMember?

        init(dialed: Bool, plan: DialPlan? = nil) {
            self.dialed = dialed
            self.plan = plan
            peer = plan?.peer
        }
    }

    let configuration: SessionCoreConfiguration
    private var random: any RandomNumberGenerator
    // Exclusivity unchecked on the tables read for every message and datagram: the core is
    // confined to its engine's loop, and nothing re-enters it while one of them is accessed.
    @exclusivity(unchecked) private(set) var links: [LinkID: Link] = [:]
    @exclusivity(unchecked) private var activeLink: [Bytes16: LinkID] = [:]
    @exclusivity(unchecked) private var receiverIDs: [UInt32: LinkID] = [:]
    private var tokens = TokenTable()
    private var pending: PendingConnections<LinkID>
    private var introductions = IntroductionLedger()
    /// Version 2 members over TLS, connected or suspended (docs/PROTOCOL.md §7.9).
    @exclusivity(unchecked) private var recoverable: [Bytes16: RecoverableMember] = [:]
    /// Each recoverable member's resumption ID, to find it from a resumption's HELLO.
    private var resumptionIDs: [Bytes16: Bytes16] = [:]
    private var suspensions = 0
    /// The host's addresses at the last look (`localAddressesChanged`).
    private var hostAddresses: Set<String>?
    private var reporter = PeerReporter()
    private var nextLinkID = 1
    /// Timers scheduled and not yet fired or called off; a firing that is not here is ignored,
    /// so a disconnect or cancel is final even with timers in flight.
    private var liveTimers: Set<SessionTimer> = []
    private var actions: [SessionAction] = []
    private var spareActions: [SessionAction] = []

    private var local: Bytes16 { configuration.localPeer.identifier }
    private var logger: Logger { configuration.logger }

    package init(configuration: SessionCoreConfiguration, random: any RandomNumberGenerator = SystemRandomNumberGenerator()) {
        self.configuration = configuration
        self.random = random
        pending = PendingConnections(
            limit: configuration.maximumPendingConnections, perSourceLimit: configuration.maximumPendingConnectionsPerSource)
    }

    /// Hands out the actions the last inputs produced, in order, reusing their storage (this runs
    /// for every message). `body` may feed the core again; what that produces is handed out by
    /// the caller's next drain.
    package func forEachAction(_ body: (SessionAction) -> Void) {
        guard !actions.isEmpty else { return }
        var taken = actions
        actions = spareActions
        spareActions = []
        for action in taken { body(action) }
        taken.removeAll(keepingCapacity: true)
        if spareActions.capacity == 0 { spareActions = taken }
    }

    // MARK: Commands from the API

    /// A fresh single-use token that lets `peer` dial us until `now` plus the token lifetime.
    package func issueToken(forPeer peer: Bytes16, now: NIODeadline) -> Bytes16 {
        let token = Bytes16.random(using: &random)
        tokens.issue(token, forPeer: peer, until: now + .seconds(Int64(WireLimits.connectionTokenLifetimeSeconds)), now: now)
        return token
    }

    /// Dial the peer that made some connection data, unless we already have a link to it.
    package func connect(_ plan: DialPlan) {
        let peer = plan.peer.identifier
        guard peer != local, linkIDs(for: peer).isEmpty else { return }
        guard hasRoomForMember(besides: peer) else {
            report(plan.peer, .connecting)
            report(plan.peer, .notConnected(ConnectionError(.notAdmitted(.sessionFull))))
            return
        }
        startDialing(plan)
    }

    /// Abandons every connection attempt to `peer` that has not completed.
    package func cancelConnect(peer: Bytes16) {
        // A suspended member is connected, for the app: nothing of it is an attempt to call off.
        guard !isSuspended(peer) else { return }
        for id in linkIDs(for: peer) where !links[id]!.isConnected {
            let link = forget(id)
            actions.append(.drop(id))
            if let wirePeer = link?.peer { report(wirePeer, .notConnected(ConnectionError(.closedLocally))) }
        }
        // A redial or a wait for the peer's own connection is called off too.
        for timer in liveTimers where timer.isConnectionAttempt && timer.peer.identifier == peer {
            liveTimers.remove(timer)
            if linkIDs(for: peer).isEmpty { report(timer.peer, .notConnected(ConnectionError(.closedLocally))) }
        }
    }

    /// Ends every connection; each peer the app saw is reported not connected.
    package func disconnect() {
        for id in links.keys.sorted() { actions.append(.drop(id)) }
        for peer in activeLink.keys.sorted() { actions.append(.memberLeft(peer)) }
        for (peer, member) in recoverable.sorted(by: { $0.key < $1.key }) where member.suspension != nil {
            actions.append(.memberLeft(peer))
        }
        recoverable.removeAll()
        resumptionIDs.removeAll()
        for peer in reporter.visiblePeers.sorted(by: { $0.identifier < $1.identifier }) {
            report(peer, .notConnected(ConnectionError(.closedLocally)))
        }
        links.removeAll()
        pending.removeAll()
        liveTimers.removeAll()
        activeLink.removeAll()
        receiverIDs.removeAll()
        tokens.removeAll()
        introductions = IntroductionLedger()
    }

    // MARK: Connection life cycle

    /// A connection from `source` was accepted. Returns its link and, when pending connections
    /// are at their limit, the one to close first (`PendingConnections` says which).
    package func inboundAccepted(from source: PendingSource, progress: (LinkID) -> PendingProgress) -> (LinkID, shed: LinkID?) {
        let id = addLink(Link(dialed: false))
        return (id, pending.accepted(id, from: source, progress: progress))
    }

    /// Out of file descriptors: the pending inbound connection to close.
    package func pendingToShed(progress: (LinkID) -> PendingProgress) -> LinkID? {
        pending.shedOne(progress: progress)
    }

    var pendingCount: Int { pending.count }

    /// The receiver ID our HELLO on this link announces (docs/PROTOCOL.md §8): unique among our links.
    package func allocateReceiverID(for id: LinkID) -> UInt32 {
        // A dial that moves on to its next endpoint keeps the ID it had.
        guard let link = links[id] else { return 0 }  // a forgotten link gets no ID (and no handlers)
        if link.receiverID != 0 { return link.receiverID }
        while true {
            let candidate = UInt32.random(in: 1 ... .max, using: &random)
            if receiverIDs[candidate] == nil {
                receiverIDs[candidate] = id
                link.receiverID = candidate
                return candidate
            }
        }
    }

    /// A dial's TCP connection is up, at `endpoint`; its handshake begins.
    package func dialConnected(_ id: LinkID, at endpoint: WireEndpoint? = nil) {
        links[id]?.transportUp = true
        links[id]?.dialedEndpoint = endpoint
    }

    /// Whether the link still exists (a dial whose socket lands after a cancel must be closed).
    package func isLive(_ id: LinkID) -> Bool { links[id] != nil }

    /// None of a dial's endpoints took the TCP connection.
    package func dialFailed(_ id: LinkID) {
        guard let link = forget(id), let peer = link.peer else { return }
        // A suspended member's redial: the next one, or the grace period, decides.
        guard !isSuspended(peer.identifier) else { return }
        report(peer, .notConnected(ConnectionError(.connectionClosed)))
    }

    /// A listener's decision on a dialer's HELLO (docs/PROTOCOL.md §7.3-§7.5, §9.3).
    /// `peerCertificate`: SHA-256 of the leaf the dialer showed (nil without one).
    package func admit(_ hello: Hello, peerCertificate: [UInt8]? = nil, on id: LinkID, now: NIODeadline) -> ConnectionConfiguration.Admission {
        let admission = decideAdmission(hello, peerCertificate: peerCertificate, on: id, now: now)
        if case .refuse(let reason) = admission {
            logger.notice("refused a connection", metadata: ["peer": hello.peerID.logValue, "reason": "\(reason)"])
            // The app hears of refusals a genuine peer can meet (stale data, a full session), not
            // of duplicates or of protocol misuse, which a stranger could repeat at will.
            if (reason == .unknownToken || reason == .sessionFull) && hello.purpose != .resumption {
                actions.append(.refused(hello.peerID, reason))
            }
        }
        return admission
    }

    private func decideAdmission(_ hello: Hello, peerCertificate: [UInt8]?, on id: LinkID, now: NIODeadline) -> ConnectionConfiguration.Admission {
        let peer = hello.peerID.identifier
        guard peer != local else { return .refuse(.protocolError) }
        switch hello.purpose {
        case .connectionData:
            guard tokens.redeem(hello.token, by: peer, now: now) else { return .refuse(.unknownToken) }
        case .meshIntroduction:
            // A member we are connected to must have introduced this peer to us (§7.4).
            guard activeLink[hello.token] != nil, introductions.consume(peer, by: hello.token, now: now) else {
                return .refuse(.unknownToken)
            }
        case .invitation:
            // No advertiser takes invitations yet: they arrive with discovery (§7.2).
            return .refuse(.protocolError)
        case .answer:
            return .refuse(.protocolError)  // the connection already treats this as a violation
        case .resumption:
            return admitResumption(hello, peerCertificate: peerCertificate, on: id, now: now)
        }
        for otherID in linkIDs(for: peer) where otherID != id {
            let other = links[otherID]!
            // Both dialed at once: the connection dialed by the larger identifier survives (§7.5).
            guard other.dialed && !other.isConnected && peer > local else { return .refuse(.duplicateConnection) }
            other.closingSilently = true
            forget(otherID)
            actions.append(.close(otherID, .duplicateConnection))
        }
        guard hasRoomForMember(besides: peer) else { return .refuse(.sessionFull) }
        links[id]?.peer = hello.peerID
        return .admit
    }

    /// Both TLS and HELLO are done and the app must judge the peer. Returns whether to ask it:
    /// false ends the connection without asking (a dial that met another peer than it planned).
    package func trustRequested(_ request: PeerTrustRequest, on id: LinkID) -> Bool {
        guard let link = links[id] else { return false }
        // The connection already ended a dial that met another certificate or peer ID than the
        // plan named (§9.3); this keeps a mismatch from ever reaching the app.
        if let plan = link.plan, request.peer.identifier != plan.peer.identifier { return false }
        link.peer = request.peer
        // The peer started over (a new session of its own): the suspended one is over.
        if let member = recoverable[request.peer.identifier], let suspension = member.suspension {
            endMember(member, suspension.error)
        }
        report(request.peer, .connecting)
        return true
    }

    /// Both sides accepted each other. `remoteHost` is the peer's IP address as the socket saw it
    /// (`remoteScope`: its interface, for an IPv6 link-local address, so that it can be redialed);
    /// `datagramKeys` derives datagram keys from the TLS session (nil on a plaintext connection).
    package func established(
        _ connection: EstablishedConnection, on id: LinkID, remoteHost: String?, remoteScope: UInt32? = nil, localHost: String? = nil,
        datagramKeys: @escaping DatagramPeerState.KeySource
    ) {
        guard let link = links[id] else { return }
        link.remoteScope = remoteScope
        link.localHost = localHost
        let peer = connection.peer
        if let delivered = connection.resumedPeerDelivered {
            resumed(link, id, connection, peerDelivered: delivered, remoteHost: remoteHost, datagramKeys: datagramKeys)
            return
        }
        // Admission and dialing keep the member limit; this holds it whatever the path.
        guard MemberLimit.hasRoom(besides: memberPeers(besides: peer.identifier).count) else {
            actions.append(.close(id, .sessionFull))
            return
        }
        attach(link, id, connection, remoteHost: remoteHost, datagramKeys: datagramKeys)
        if let keys = connection.resumptionKeys {
            let member = RecoverableMember(
                peer: peer, keys: keys, certificateFingerprint: connection.certificateChain?.first?.sha256Fingerprint,
                listenEndpoint: link.listenEndpoint)
            member.linkScope = remoteScope
            recoverable[peer.identifier] = member
            resumptionIDs[member.resumptionID] = peer.identifier
            link.member = member
            link.channels?.streams = member.streams
        }
        actions.append(.memberJoined(peer, id, acceptsDatagrams: link.datagram != nil))
        logger.info("connected", metadata: [
            "peer": peer.logValue, "encrypted": "\(connection.isEncrypted)",
            "cipherSuite": "\(connection.cipherSuite ?? "none")", "dialed": "\(link.dialed)",
        ])
        report(peer, .connected)
        // A member that joined through an introduction already knows everyone the introducer knew.
        let joinedByIntroduction = link.plan?.purpose == .meshIntroduction || connection.peerHello.purpose == .meshIntroduction
        if !joinedByIntroduction { introduceMembers(toAndAbout: id) }
    }

    /// What a link of a member gets once established, new or resumed.
    private func attach(
        _ link: Link, _ id: LinkID, _ connection: EstablishedConnection, remoteHost: String?,
        datagramKeys: @escaping DatagramPeerState.KeySource
    ) {
        let peer = connection.peer
        link.isConnected = true
        pending.remove(id)
        link.peer = peer
        let hello = connection.peerHello
        if hello.datagramPort != 0, link.receiverID != 0, let host = remoteHost,
            let address = try? SocketAddress(ipAddress: host, port: Int(hello.datagramPort))
        {
            link.datagramAddress = address
            link.datagram = DatagramPeerState(
                isEncrypted: connection.isEncrypted, weAreDialer: link.dialed, peerReceiverID: hello.datagramReceiverID,
                limits: configuration.datagramLimits, keySource: datagramKeys)
        }
        if let host = remoteHost,
            let seen = try? WireEndpoint(socketAddress: SocketAddress(ipAddress: host, port: Int(max(hello.listenPort, 1))))
        {
            // A peer that accepts no connections is still introduced, so that others let it dial them.
            link.listenEndpoint = hello.listenPort == 0 ? .notListening(at: seen.address) : seen
        }
        activeLink[peer.identifier] = id
        link.channels = ChannelMux(weAreDialer: link.dialed, limits: configuration.channelLimits)
    }

    /// A frame the connection delivered (only after `established`).
    /// Returns a completed message to deliver (the hot path, so not an action); anything else
    /// comes out as actions. `now` is read only for the frames that need it, not per message.
    package func received(_ frame: Frame, on id: LinkID, now: @autoclosure () -> NIODeadline) -> (ByteBuffer, WirePeerID)? {
        guard let link = links[id], let peer = link.peer else { return nil }
        switch frame {
        case .message(let fragment, let isEnd):
            do {
                if let message = try link.assembler.append(fragment, isEnd: isEnd) {
                    if let member = link.member { delivered(message, by: member, on: id, now: now()) }
                    return (message, peer)
                }
            } catch {
                // The app learns why: a message over the limit is the peer's violation.
                actions.append(.abort(id, ConnectionError(.protocolViolation(error))))
            }
        case .meshIntroduction(let introduction) where link.isConnected && activeLink[peer.identifier] == id:
            introduced(introduction, by: peer, now: now())
        case .acknowledge(let count):
            guard let member = link.member, activeLink[peer.identifier] == id else { break }
            do {
                let charge = try member.ledger.peerDelivered(count)
                if charge > 0 { actions.append(.acknowledged(peer.identifier, charge: charge)) }
            } catch {
                actions.append(.abort(id, ConnectionError(.protocolViolation(WireError(.invalidValue, "\(error)")))))
            }
        default:
            // PONG needs nothing. Stream, resource and window frames never get here: the
            // connection answers them itself (refusal, discard or GOODBYE, §7.6).
            break
        }
        return nil
    }

    /// One UDP datagram from anywhere: the message it carries, or nil when it is dropped.
    /// Never answered (docs/PROTOCOL.md §8).
    /// `admits` is asked, with the link and the message's length, before the datagram is opened:
    /// one the application has no room for is dropped unopened, without the AEAD's work and
    /// without moving any state, as if it had been lost on the way.
    package func datagramReceived(
        _ data: ByteBuffer, from source: SocketAddress, admits: (LinkID, Int) -> Bool = { _, _ in true }
    ) -> (ByteBuffer, WirePeerID, LinkID)? {
        guard let (header, body) = try? DatagramHeader.decode(datagram: data),
            let id = receiverIDs[header.receiverID], let link = links[id], link.isConnected,
            let peer = link.peer, let kind = link.datagram?.kind
        else { return nil }
        // Without keys, at least insist on the peer's own address.
        if kind == .plain && source.ipAddress != link.datagramAddress?.ipAddress { return nil }
        let length = kind == .sealed ? max(0, body.readableBytes - WireLimits.datagramTagLength) : body.readableBytes
        guard admits(id, length) else { return nil }
        switch link.datagram?.open(header: header, body: body) {
        case .message(let message): return (message, peer, id)
        case .dropped, nil: return nil
        case .integrityLimitReached:
            actions.append(.close(id, .timedOut))
            return nil
        }
    }

    /// Seals one unreliable message for `peer`: the datagram and where it goes, or nil when the
    /// peer is not connected or takes no datagrams.
    package func sealDatagram(_ message: ByteBuffer, to peer: Bytes16) -> (ByteBuffer, SocketAddress)? {
        guard let id = activeLink[peer], let link = links[id], let address = link.datagramAddress,
            let datagram = link.datagram?.seal(message)
        else { return nil }
        return (datagram, address)
    }

    /// The link that carries reliable messages to `peer`.
    /// The member link's channels, changed in place; nil unless the link is a member's.
    package func channels<Result>(on id: LinkID, _ body: (inout ChannelMux) -> Result) -> Result? {
        guard let link = links[id], link.channels != nil else { return nil }
        return body(&link.channels!)
    }

    package func activeLink(to peer: Bytes16) -> LinkID? { activeLink[peer] }

    /// Whether any link carries a member now.
    package var hasConnectedMembers: Bool { !activeLink.isEmpty }

    /// Whether a member's link is lost and recovering.
    package var hasSuspendedMembers: Bool { recoverable.values.contains { $0.suspension != nil } }

    /// The host's addresses now. A member's connection from an address the host had at the last
    /// look and no longer has is lost at once (the host moved, §7.9), rather than at the
    /// dead-peer deadline: nothing can reach it there. It closes without GOODBYE, which could
    /// only end the session. An address the host never listed (a listener on 127.0.0.2, say)
    /// is left alone.
    package func localAddressesChanged(to addresses: Set<String>, now: NIODeadline) {
        defer { hostAddresses = addresses }
        guard let before = hostAddresses else { return }
        let stranded = activeLink.values.filter { id in
            links[id]?.localHost.map { before.contains($0) && !addresses.contains($0) } ?? false
        }
        for id in stranded.sorted() {
            logger.info("our address on a connection is gone", metadata: ["peer": links[id]?.peer?.logValue ?? "?"])
            // Channels first, then whatever the loss makes the app hear.
            actions.append(.sever(id))
            closed(id, ConnectionError(.connectionClosed), now: now)
        }
        // An address went: a redial still connecting may have left from it.
        guard !before.subtracting(addresses).isEmpty else { return }
        for (_, member) in recoverable.sorted(by: { $0.key < $1.key }) where member.suspension != nil {
            redial(member, .weMoved, now: now)
        }
    }

    /// Discovery saw `peer`'s host at `addresses` (found, or its addresses changed). A suspended
    /// member that listens is redialed there at once, on the port it listens on: it may have
    /// moved, and when we moved too, neither side's old address leads anywhere and no other
    /// member may be left to introduce it (§7.9). IPv6 link-local addresses are left out (a
    /// dial names one interface for all its endpoints), and so is what a redial tries anyway.
    /// Only for a member with an identity: anyone on the link can answer mDNS for it, and a
    /// redial that pins no certificate would hand such a host the session's resumption ID.
    package func peerDiscovered(_ peer: Bytes16, at addresses: [WireEndpoint.Address], now: NIODeadline) {
        guard let member = recoverable[peer], member.suspension != nil, member.certificateFingerprint != nil,
            let port = member.listenEndpoint?.port, port != 0
        else { return }
        var endpoints: [WireEndpoint] = []
        for address in addresses {
            guard let endpoint = try? WireEndpoint(address: address, port: port), !endpoint.isLinkLocal,
                endpoint != member.listenEndpoint, endpoint != member.introducedEndpoint, !endpoints.contains(endpoint)
            else { continue }
            endpoints.append(endpoint)
            if endpoints.count == RecoverableMember.maxDiscoveredEndpoints { break }
        }
        guard !endpoints.isEmpty, endpoints != member.discoveredEndpoints else { return }
        member.discoveredEndpoints = endpoints
        logger.info("discovery sees a recovering member elsewhere", metadata: ["peer": member.peer.logValue])
        redial(member, .news, now: now)
    }

    /// The connection ended (after `established` or instead of it).
    package func closed(_ id: LinkID, _ error: ConnectionError, now: NIODeadline) {
        // A loss, or the peer's word that another connection carries the member now (GOODBYE 7:
        // it admitted a resumption of ours while this one was up).
        let superseded = error == ConnectionError(.peerSaidGoodbye(.duplicateConnection))
        if let link = links[id], let peer = link.peer?.identifier, activeLink[peer] == id, let member = link.member,
            configuration.recovery.isEnabled, error.isLinkLoss || superseded
        {
            // Not a member's end yet: it stays connected while both sides reconnect (§7.9).
            activeLink[peer] = nil
            forget(id)
            suspend(member, error, now: now)
            return
        }
        // A resumption dial that did not get through (once through, it ends as any other).
        if let link = links[id], !link.isConnected, link.plan?.purpose == .resumption, let peer = link.peer {
            forget(id)
            // What answered there was not the member, or stalled: the next redial tries it last.
            // (GOODBYE 7 is the member itself, keeping another connection.)
            if let endpoint = link.dialedEndpoint, let member = recoverable[peer.identifier],
                error != ConnectionError(.peerSaidGoodbye(.duplicateConnection))
            {
                member.handshakeFailed(at: endpoint)
            }
            resumptionEnded(peer, error)
            return
        }
        guard let link = forget(id) else { return }
        guard let peer = link.peer else {
            logger.debug("a connection closed before HELLO", metadata: ["reason": "\(error)", "dialed": "\(link.dialed)"])
            return
        }
        logger.info(
            link.isConnected ? "connection ended" : "connection failed",
            metadata: ["peer": peer.logValue, "reason": "\(error)", "dialed": "\(link.dialed)"])
        // A superseded duplicate, a peer with another link, or a suspended member (whose grace
        // period decides) goes quietly.
        guard !link.closingSilently, linkIDs(for: peer.identifier).isEmpty, !isSuspended(peer.identifier) else { return }
        if let plan = link.plan, plan.purpose == .meshIntroduction, link.attempt < configuration.introducedDialRetries,
            error == ConnectionError(.peerSaidGoodbye(.unknownToken))
        {
            // Our introduction may have overtaken the one the introducer sent the peer: try again.
            schedule(.redialIntroduced(plan, attempt: link.attempt + 1), at: now + configuration.introducedDialDelay(beforeAttempt: link.attempt + 1))
            return
        }
        if error == ConnectionError(.peerSaidGoodbye(.duplicateConnection)) && !link.isConnected {
            // The peer kept its own connection to us, which may not have said HELLO here yet:
            // stay "connecting" until it shows up, or until the handshake deadline passes.
            schedule(.awaitPeersConnection(peer, error), at: now + configuration.handshakeTimeout)
            return
        }
        report(peer, .notConnected(error))
    }

    /// `timer` is due; `now` may be later than its deadline (a busy loop fires it late).
    package func timerFired(_ timer: SessionTimer, now: NIODeadline) {
        guard liveTimers.remove(timer) != nil else { return }
        switch timer {
        case .redialIntroduced(let plan, let attempt):
            let peer = plan.peer.identifier
            if linkIDs(for: peer).isEmpty && hasRoomForMember(besides: peer) {
                startDialing(plan, attempt: attempt)
            } else if linkIDs(for: peer).isEmpty {
                report(plan.peer, .notConnected(ConnectionError(.notAdmitted(.sessionFull))))
            }
        case .awaitPeersConnection(let peer, let error):
            if linkIDs(for: peer.identifier).isEmpty { report(peer, .notConnected(error)) }
        case .redialSuspended(let peer, let number, let attempt):
            guard let member = recoverable[peer.identifier], let suspension = member.suspension, suspension.number == number else { return }
            // The next try, chained: one timer per suspension, whatever the grace.
            let next = suspension.since + configuration.recovery.redialOffset(attempt + 1)
            if next < suspension.since + configuration.recovery.grace {
                schedule(.redialSuspended(peer, suspension: number, attempt: attempt + 1), at: next)
            }
            redial(member, .schedule, now: now)
        case .recoveryExpired(let peer, let number):
            guard let member = recoverable[peer.identifier], let suspension = member.suspension, suspension.number == number else { return }
            logger.info("link recovery gave up", metadata: ["peer": peer.logValue, "reason": "\(suspension.error)"])
            endMember(member, suspension.error)
        case .acknowledge(let peer):
            guard let member = recoverable[peer.identifier] else { return }
            member.acknowledgementArmed = false
            if let id = activeLink[peer.identifier], let count = member.ledger.acknowledgementDue() {
                actions.append(.sendFrame(.acknowledge(delivered: count), on: id))
            }
        }
    }

    // MARK: Link recovery (docs/PROTOCOL.md §7.9)

    /// What the app sends to `peer`: the link to write it on, or nil while the member is
    /// suspended or gone, and whether the member keeps it until acknowledged (then its send
    /// budget comes back with `acknowledged`, not when written).
    package func sendingReliable(_ message: ByteBuffer, to peer: Bytes16) -> (link: LinkID?, kept: Bool) {
        let link = activeLink[peer]
        guard let member = recoverable[peer] else { return (link, false) }
        member.ledger.sending(message)
        return (link, true)
    }

    /// The member's resumption ID (it never leaves the TLS connections): for tests that play a
    /// peer who learned it.
    package func resumptionID(of peer: Bytes16) -> Bytes16? { recoverable[peer]?.resumptionID }

    /// Whether the member keeps what is sent to it until acknowledged (version 2 over TLS).
    package func keepsMessages(for peer: Bytes16) -> Bool { recoverable[peer] != nil }

    /// Whether the peer is still a member that outlives its links (suspended, or carried by
    /// another link): what its lost link carried waits for the resumed one rather than failing.
    package func isRecoverableMember(_ peer: Bytes16) -> Bool { recoverable[peer] != nil }

    /// The member's streams across its connections (§7.10); nil for a peer that is not a member
    /// of version 2 over TLS.
    package func streams(of peer: Bytes16) -> MemberStreams? { recoverable[peer]?.streams }

    private func delivered(_ message: ByteBuffer, by member: RecoverableMember, on id: LinkID, now: NIODeadline) {
        if let count = member.ledger.deliveredMessage(bytes: message.readableBytes) {
            actions.append(.sendFrame(.acknowledge(delivered: count), on: id))
        } else if !member.acknowledgementArmed {
            member.acknowledgementArmed = true
            schedule(.acknowledge(member.peer), at: now + configuration.recovery.acknowledgementDelay)
        }
    }

    private func suspend(_ member: RecoverableMember, _ error: ConnectionError, now: NIODeadline) {
        // An introduction that came while the link still seemed up is news only if recent (the
        // loss may be what it told of); an older one leads redials astray.
        if let at = member.introducedAt, now - at > configuration.recovery.grace { member.introducedEndpoint = nil }
        member.newsRedial = nil
        suspensions += 1
        member.suspension = (now, error, suspensions)
        logger.info("link lost; recovering", metadata: ["peer": member.peer.logValue, "reason": "\(error)"])
        actions.append(.memberSuspended(member.peer))
        schedule(.redialSuspended(member.peer, suspension: suspensions, attempt: 0), at: now + configuration.recovery.redialOffsets[0])
        schedule(.recoveryExpired(member.peer, suspension: suspensions), at: now + configuration.recovery.grace)
    }

    /// A resumption dial of ours ended without resuming. Refused, the peer no longer has the
    /// session: the member is over. Otherwise the next redial may get through.
    private func resumptionEnded(_ peer: WirePeerID, _ error: ConnectionError) {
        guard let member = recoverable[peer.identifier], let suspension = member.suspension else { return }
        // Only a listener whose certificate was pinned is surely the peer; without an identity,
        // whoever answers at the old address could say anything, so the grace decides.
        guard member.certificateFingerprint != nil else { return }
        if error.code == .peerSaidGoodbye, error != ConnectionError(.peerSaidGoodbye(.duplicateConnection)) {
            logger.info("the peer refused to resume", metadata: ["peer": peer.logValue, "reason": "\(error)"])
            endMember(member, suspension.error)
        }
    }

    /// The member leaves for good: the app hears `notConnected` with why its link was lost.
    private func endMember(_ member: RecoverableMember, _ error: ConnectionError) {
        let peer = member.peer.identifier
        recoverable[peer] = nil
        resumptionIDs[member.resumptionID] = nil
        for id in linkIDs(for: peer) where links[id]?.plan?.purpose == .resumption {
            forget(id)
            actions.append(.drop(id))
        }
        if let id = activeLink[peer] {
            activeLink[peer] = nil
            forget(id)
            actions.append(.drop(id))
        }
        actions.append(.memberLeft(peer))
        report(member.peer, .notConnected(error))
    }

    private func admitResumption(_ hello: Hello, peerCertificate: [UInt8]?, on id: LinkID, now: NIODeadline) -> ConnectionConfiguration.Admission {
        let peer = hello.peerID.identifier
        // The same peer with the same certificate, before anything changes: what the proof adds
        // (next, in the connection) is that it held the session.
        guard configuration.recovery.isEnabled, resumptionIDs[hello.token] == peer, let member = recoverable[peer],
            member.certificateFingerprint == peerCertificate
        else {
            return .refuse(.unknownToken)
        }
        if let old = activeLink[peer] {
            // The peer lost the link before we noticed: ours is half open. It goes quietly, and
            // the member is suspended for this connection to resume it.
            activeLink[peer] = nil
            links[old]?.closingSilently = true
            forget(old)
            actions.append(.close(old, .duplicateConnection))
            suspend(member, ConnectionError(.connectionClosed), now: now)
        }
        guard member.suspension != nil else { return .refuse(.unknownToken) }
        for otherID in linkIDs(for: peer) where otherID != id {
            guard let other = links[otherID], !other.isConnected else { return .refuse(.duplicateConnection) }
            // Both sides redialed at once: the connection dialed by the larger identifier stays
            // (§7.5), but a dial of ours that has not reached the peer yields to one that has
            // (its address may be stale); an earlier attempt of the peer's yields to this one.
            if other.dialed && other.transportUp && local > peer { return .refuse(.duplicateConnection) }
            other.closingSilently = true
            forget(otherID)
            actions.append(.close(otherID, .duplicateConnection))
        }
        links[id]?.peer = hello.peerID
        return .resume(member.grant())
    }

    /// A resumption connection is established: the member is carried by it again, and what the
    /// peer did not deliver goes again, first.
    private func resumed(
        _ link: Link, _ id: LinkID, _ connection: EstablishedConnection, peerDelivered: UInt64, remoteHost: String?,
        datagramKeys: @escaping DatagramPeerState.KeySource
    ) {
        let peer = connection.peer
        guard let member = recoverable[peer.identifier], member.suspension != nil else {
            // Another connection resumed the member first (ours and the peer's crossed). Nothing
            // of this one may be delivered: the peer resends on it from the count our RESUME gave
            // when it was dialed, which the other connection has since passed.
            link.closingSilently = true
            forget(id)
            actions.append(.close(id, .duplicateConnection))
            return
        }
        let resend: [ByteBuffer]
        do {
            let (charge, messages) = try member.ledger.resume(peerDelivered: peerDelivered)
            if charge > 0 { actions.append(.acknowledged(peer.identifier, charge: charge)) }
            resend = messages
        } catch {
            actions.append(.abort(id, ConnectionError(.protocolViolation(WireError(.invalidValue, "\(error)")))))
            return
        }
        attach(link, id, connection, remoteHost: remoteHost, datagramKeys: datagramKeys)
        // The session keeps the keys of the connection that made it: a loss between the two
        // RESUMEs must leave both sides with the same ones (§7.9).
        member.suspension = nil
        member.introducedEndpoint = nil
        member.failedEndpoint = nil
        member.discoveredEndpoints = []
        if let endpoint = link.listenEndpoint {
            member.listenEndpoint = endpoint
            member.linkScope = link.remoteScope
        }
        link.member = member
        link.channels?.streams = member.streams
        logger.info("link recovered", metadata: ["peer": peer.logValue, "resent": "\(resend.count)", "dialed": "\(link.dialed)"])
        actions.append(.memberResumed(peer, id, acceptsDatagrams: link.datagram != nil, resend: resend))
        // Members that joined meanwhile were introduced to the others only.
        introduceMembers(toAndAbout: id)
    }

    private func isSuspended(_ peer: Bytes16) -> Bool { recoverable[peer]?.suspension != nil }

    /// Why a suspended member is redialed.
    private enum RedialCause {
        /// The next of the suspension's redials.
        case schedule
        /// Someone says where the member is now: a dial of ours still connecting elsewhere may
        /// be to a dead address, whose connect can take seconds to fail.
        case news
        /// One of our own addresses went: a dial of ours still connecting may have left from it.
        case weMoved
    }

    /// A resumption dial to a suspended member, unless one of ours is under way. One still
    /// connecting makes way for a new dial when:
    /// - the schedule comes round and it has been connecting for a redial step, and its last
    ///   endpoint for an attempt delay: its SYNs are being lost (a dead address, or ours dropped
    ///   meanwhile), and a dial whose connect waits out its deadline leaves a gap of a step
    ///   without SYNs, so a fresh one every step gets through soonest once the path is back;
    /// - news names an endpoint it does not try, at most once per redial step, so news that
    ///   comes faster (a hostile member, anyone answering mDNS) starts no more dials than the
    ///   schedule does and cannot keep the old address from being tried; what it said waits
    ///   for the next redial;
    /// - one of our addresses went (it may have left from it).
    /// One whose TCP connection is up finishes its handshake. An attempt of the peer's
    /// (inbound) does not hold ours up: it may have stalled.
    private func redial(_ member: RecoverableMember, _ cause: RedialCause = .schedule, now: NIODeadline) {
        let endpoints = member.redialEndpoints
        let ours = linkIDs(for: member.peer.identifier).filter { links[$0]?.dialed == true }
        for id in ours {
            guard let link = links[id], !link.transportUp, let plan = link.plan else { return }
            switch cause {
            case .schedule:
                let attemptDelay = plan.attemptDelay ?? .zero
                let lastStartedAndTried = attemptDelay * Int64(plan.endpoints.count)
                let stale = max(configuration.recovery.redialStep, lastStartedAndTried)
                // Stamped when its timer fired: each fires late by its own few milliseconds, so a
                // dial one tick old may look a little younger than the step. A quarter step of
                // slack keeps every tick; a dial made by a timer that fired far later is kept.
                let slack = TimeAmount.nanoseconds(configuration.recovery.redialStep.nanoseconds / 4)
                guard let started = link.dialStarted, now + slack >= started + stale else { return }
            case .news:
                guard endpoints.contains(where: { !plan.endpoints.contains($0) }) else { return }
                if let last = member.newsRedial, now < last + configuration.recovery.redialStep { return }
            case .weMoved:
                break
            }
        }
        if cause == .news && !ours.isEmpty { member.newsRedial = now }
        guard !endpoints.isEmpty,
            let plan = DialPlan(
                resuming: member.peer, id: member.resumptionID, at: endpoints, linkScope: member.linkScope, grant: member.grant())
        else { return }
        for id in ours {
            forget(id)
            actions.append(.drop(id))
        }
        member.redialStarted()
        let link = Link(dialed: true, plan: plan)
        link.dialStarted = now
        let id = addLink(link)
        actions.append(.dial(id, plan))
    }

    /// Peers that are members or becoming members: every peer with a link, and suspended members.
    private func memberPeers(besides peer: Bytes16) -> Set<Bytes16> {
        var others = Set<Bytes16>()
        for link in links.values {
            if let other = link.peer?.identifier, other != peer { others.insert(other) }
        }
        for (other, member) in recoverable where other != peer && member.suspension != nil { others.insert(other) }
        return others
    }

    // MARK: Mesh (docs/PROTOCOL.md §7.4)

    /// Tells a new member about the others, and the others about it.
    private func introduceMembers(toAndAbout newID: LinkID) {
        guard let newcomer = links[newID], let newcomerPeer = newcomer.peer else { return }
        let others = activeLink.filter { $0.key != newcomerPeer.identifier }.sorted { $0.key < $1.key }
        let entries = others.compactMap { _, otherID -> MeshIntroduction.Entry? in
            guard let other = links[otherID], let peer = other.peer, let endpoint = other.listenEndpoint else { return nil }
            return MeshIntroduction.Entry(peerID: peer, endpoint: endpoint)
        }
        if !entries.isEmpty, let introduction = try? MeshIntroduction(entries: entries) {
            actions.append(.sendFrame(.meshIntroduction(introduction), on: newID))
        }
        guard let endpoint = newcomer.listenEndpoint,
            let aboutNewcomer = try? MeshIntroduction(entries: [MeshIntroduction.Entry(peerID: newcomerPeer, endpoint: endpoint)])
        else { return }
        for (_, otherID) in others { actions.append(.sendFrame(.meshIntroduction(aboutNewcomer), on: otherID)) }
    }

    /// A connected member introduced peers. Of each pair the larger identifier dials, unless one
    /// of the two accepts no connections: then that one dials, and if neither does, neither can.
    private func introduced(_ introduction: MeshIntroduction, by introducer: WirePeerID, now: NIODeadline) {
        for entry in introduction.entries {
            let peer = entry.peerID.identifier
            guard peer != local, peer != introducer.identifier else { continue }
            // Recorded even when a connection to the peer is already under way: if the peer's
            // introduced dial wins the simultaneous-connect rule, it must be admitted.
            let deadline = now + .seconds(Int64(WireLimits.meshIntroductionLifetimeSeconds))
            // An introducer over its quota is ignored: a hostile member cannot make us dial more.
            guard introductions.record(peer, by: introducer.identifier, until: deadline, now: now) else {
                logger.notice("ignored an introduction past the introducer's quota", metadata: ["introducer": introducer.logValue])
                continue
            }
            let weDial = switch (configuration.acceptsConnections, entry.endpoint.isListening) {
            case (true, true): local > peer
            case (false, true): true
            case (_, false): false
            }
            // A member whose link is recovering is a member still: a new connection to it would
            // end the session it is resuming (§7.9). But where the introducer reaches it now is
            // news: it may have moved, and its old address lead nowhere. Redialed there at once;
            // for a member whose loss we have not noticed yet, kept for when we do.
            if let member = recoverable[peer] {
                if entry.endpoint.isListening, entry.endpoint != member.listenEndpoint, entry.endpoint != member.introducedEndpoint {
                    member.introduced(at: entry.endpoint, now: now)
                    if member.suspension != nil { redial(member, .news, now: now) }
                }
                continue
            }
            if weDial && linkIDs(for: peer).isEmpty && hasRoomForMember(besides: peer) {
                startDialing(DialPlan(introduced: entry.peerID, by: introducer.identifier, at: entry.endpoint))
            }
        }
    }

    // MARK: Helpers

    private func schedule(_ timer: SessionTimer, at deadline: NIODeadline) {
        liveTimers.insert(timer)
        actions.append(.schedule(timer, at: deadline))
    }

    private func startDialing(_ plan: DialPlan, attempt: Int = 0) {
        let link = Link(dialed: true, plan: plan)
        link.attempt = attempt
        let id = addLink(link)
        report(plan.peer, .connecting)
        actions.append(.dial(id, plan))
    }

    private func addLink(_ link: Link) -> LinkID {
        defer { nextLinkID += 1 }
        let id = LinkID(raw: nextLinkID)
        links[id] = link
        return id
    }

    /// Removes a link and everything that pointed at it.
    @discardableResult
    private func forget(_ id: LinkID) -> Link? {
        guard let link = links.removeValue(forKey: id) else { return nil }
        pending.remove(id)
        if link.receiverID != 0 { receiverIDs[link.receiverID] = nil }
        if let peer = link.peer?.identifier, activeLink[peer] == id {
            activeLink[peer] = nil
            introductions.forget(introducer: peer)
            if let member = recoverable.removeValue(forKey: peer) { resumptionIDs[member.resumptionID] = nil }
            actions.append(.memberLeft(peer))
        }
        return link
    }

    private func report(_ peer: WirePeerID, _ state: PeerConnectionState) {
        if let change = reporter.change(peer, to: state) { actions.append(.report(peer, change)) }
    }

    private func linkIDs(for peer: Bytes16) -> [LinkID] {
        links.filter { $0.value.peer?.identifier == peer }.map(\.key).sorted()
    }

    /// Whether one more peer fits in the session: every peer with a link counts, connected or
    /// not, so the member limit holds on every path (connection data, introductions, retries).
    private func hasRoomForMember(besides peer: Bytes16) -> Bool {
        MemberLimit.hasRoom(besides: memberPeers(besides: peer).count)
    }
}
