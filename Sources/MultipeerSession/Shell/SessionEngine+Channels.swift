#if canImport(Glibc)
import Glibc
#endif
import MultipeerCrypto
import MultipeerWire
import NIOCore
import Synchronization
import MultipeerProtocol

// Streams and resources (docs/PROTOCOL.md §7.6, §7.8): the shell that carries out what each
// connection's `ChannelMux` decides (which channels open, whose turn, what the peer's frames
// lead to, when windows go back) and holds the channel objects, their bytes and files.
extension SessionEngine {
    // MARK: Public API (any thread)

    /// Whether anyone takes the peers' streams and resources; asked as each arrives. Without
    /// it (or when it says no) they are refused with STREAM_RESET 3.
    package func setChannelAcceptance(_ check: @escaping @Sendable () -> Bool) {
        channelAcceptance.withLockedValue { $0 = check }
    }

    /// Deletes the partial files kept for resuming, and keeps none from now on (the session is
    /// going away): a transfer that a disconnect still to run cuts off is deleted too.
    package func discardResumableTransfers() {
        removeKept(resumeStore.withLock { $0.close() })
        armResumeExpiry()  // cancels the timer: nothing is kept
    }

    var acceptsChannels: Bool { channelAcceptance.withLockedValue { $0 }?() ?? true }

    /// Our streams and resources to `peer` that hold one of our 64 places (docs/PROTOCOL.md §7.6):
    /// open, waiting for a resumed link, or waiting for the peer to acknowledge their end.
    package func channelCount(to peer: Bytes16) -> Int { channelCounts.count(for: peer) }

    /// Opens a named byte stream to a connected peer. Returns at once; bytes written before the
    /// channel opens wait in the writer. Throws `notConnected`, `tooManyChannels` (64 of ours
    /// open to the peer) or `invalidParameter` (a name over 255 bytes).
    package func openStream(named name: String, to peer: Bytes16) throws(TransferError) -> ByteStreamWriter {
        guard name.utf8.count <= WireLimits.maxChannelNameBytes else {
            throw TransferError(.invalidParameter, detail: "stream name of \(name.utf8.count) bytes, at most 255")
        }
        guard let wirePeer = sendBudget.peers.first(where: { $0.identifier == peer }) else { throw TransferError(.notConnected) }
        guard channelCounts.reserve(peer) else { throw TransferError(.tooManyChannels) }
        let writer = ByteStreamWriter(name: name, peer: wirePeer, bufferLimit: configuration.channels.streamBufferLimit)
        eventLoop.execute { [self] in openOutbound(writer, to: peer) }
        return writer
    }

    /// Sends the regular file at `path` to a connected peer as a resource named `name` (a label:
    /// the receiver never uses it as a path). `sourceIdentity` names the content for resuming
    /// (docs/PROTOCOL.md §7.8): the same identity, size and modification time give the same
    /// transfer ID. Throws at once for an unreadable file, a bad name or size, or an unknown peer.
    package func sendResource(
        atPath path: String, named name: String, sourceIdentity: String, modificationTime: Int64? = nil, to peer: Bytes16
    ) throws(TransferError) -> ResourceTransfer {
        guard name.utf8.count <= WireLimits.maxChannelNameBytes else {
            throw TransferError(.invalidParameter, detail: "resource name of \(name.utf8.count) bytes, at most 255")
        }
        guard let wirePeer = sendBudget.peers.first(where: { $0.identifier == peer }) else { throw TransferError(.notConnected) }
        let opened: (file: OpenFile, size: UInt64, modified: Int64)
        do {
            opened = try OpenFile.openForReading(path)
        } catch {
            throw TransferError(.sourceFailure, detail: "\(error)")
        }
        guard opened.size <= WireLimits.maxResourceSize else {
            throw TransferError(.tooLarge, detail: "\(opened.size) bytes, at most \(WireLimits.maxResourceSize)")
        }
        guard channelCounts.reserve(peer) else { throw TransferError(.tooManyChannels) }
        let transferID = ChannelMux.transferID(
            receiver: peer, sourceIdentity: sourceIdentity, size: opened.size, modified: modificationTime ?? opened.modified)
        let transfer = ResourceTransfer(name: name, peer: wirePeer, size: opened.size, direction: .outgoing)
        let sender = resourceSender(.init(file: opened.file, size: opened.size, name: name, transferID: transferID), for: transfer)
        eventLoop.execute { [self] in openOutbound(sender, to: peer, transfer: transfer) }
        return transfer
    }

    /// A sender of `source` that reports to `transfer` (a new one for each connection it goes on).
    private func resourceSender(_ source: ResourceSender.Source, for transfer: ResourceTransfer) -> ResourceSender {
        let sender = ResourceSender(
            source: source, peer: transfer.peer, pool: fileIOPool, eventLoop: eventLoop,
            onProgress: { transfer.progressed(to: $0) },
            onCompletion: { result in transfer.finished(result.map { nil }) })
        transfer.setCancelHandler { sender.cancel() }
        return sender
    }

    // MARK: Our channels (on the loop)

    private func openOutbound(_ source: any OutboundChannel, to peer: Bytes16, transfer: ResourceTransfer? = nil) {
        if core.activeLink(to: peer) == nil, core.isRecoverableMember(peer) {
            // The member is recovering: the channel waits for its resumed link, as one cut off would.
            if let sender = source as? ResourceSender, let transfer {
                parkInterrupted(sender, transfer: transfer, to: peer, accepted: false, cutOff: false)
                return
            }
            if let writer = source as? ByteStreamWriter {
                parkNewStream(writer, to: peer)
                return
            }
        }
        if let writer = source as? ByteStreamWriter, writer.hasFailed {
            // Cancelled before it opened: it takes no ordinal, and the peer hears nothing.
            channelCounts.release(peer)
            return
        }
        guard let id = core.activeLink(to: peer), let link = state.value.links[id], let mux = link.mux,
            let connection = link.socket
        else {
            channelCounts.release(peer)
            source.failed(TransferError(.notConnected))
            return
        }
        let opened: (channel: UInt32, ordinal: UInt32?)? =
            source.carriesResource ? channels(of: mux, { $0.open(.resource) }).flatMap { $0.map { ($0, nil) } } : channels(of: mux, { $0.openStream() }) ?? nil
        guard let (channel, ordinal) = opened else {
            channelCounts.release(peer)
            source.failed(TransferError(.tooManyChannels))
            return
        }
        if let ordinal, let writer = source as? ByteStreamWriter {
            // The member's from now on: it outlives this connection (docs/PROTOCOL.md §7.10).
            writer.retain(as: ordinal)
            streamEndpoints(of: peer).writers[ordinal] = writer
        }
        let wanted = source.bind(channel: channel, linkage: mux)
        guard wanted || ordinal != nil else {
            // Cancelled before it opened: nothing was sent.
            channels(of: mux) { $0.endOutbound(channel) }
            channelCounts.release(peer)
            return
        }
        mux.outbound[channel] = source
        mux.transfers[channel] = transfer
        let linkRecovery = channels(of: mux) { $0.recoversLinks } ?? false
        writeChannelFrame(source.openingFrame(channel: channel, linkRecovery: linkRecovery), on: connection, flush: true)
        // Cancelled as it opened: its ordinal is taken, so the peer must see it open and end.
        if !wanted { channelSend(.streamReset(channel: channel, code: .cancelled), on: id) }
    }

    /// Serves ready channels one frame each while the socket takes more. On the loop, from `pump`.
    func serveChannels(_ link: EngineState.Link, on connection: any Channel) {
        guard let mux = link.mux else { return }
        var wrote = false
        while connection.isWritable, let (channel, allowance) = channels(of: mux, { $0.next() }) ?? nil {
            guard let source = mux.outbound[channel] else {
                channels(of: mux) { $0.endOutbound(channel) }
                continue
            }
            switch source.nextOutput(allowance: allowance) {
            case .data(let bytes):
                channels(of: mux) { $0.served(channel, .data(bytes.readableBytes)) }
                let frame: Frame = source.carriesResource ? .resourceChunk(channel: channel, bytes) : .streamData(channel: channel, bytes)
                writeChannelFrame(frame, on: connection, flush: false)
                wrote = true
            case .finish(let frame):
                channels(of: mux) { $0.served(channel, .idle) }
                writeChannelFrame(frame, on: connection, flush: false)
                wrote = true
                if channels(of: mux, { $0.weSend(frame) }) == true { dropOutbound(channel, of: link) }
            case .idle:
                channels(of: mux) { $0.served(channel, .idle) }
            case .blocked:
                channels(of: mux) { $0.served(channel, .blocked) }
            }
        }
        if wrote { connection.flush() }
    }

    /// The mux ended our channel: its endpoint goes, and its place among our 64.
    @discardableResult
    private func dropOutbound(_ channel: UInt32, of link: EngineState.Link) -> (any OutboundChannel)? {
        guard let source = link.mux?.outbound.removeValue(forKey: channel) else { return nil }
        link.mux?.transfers[channel] = nil
        if let peer = link.member?.identifier {
            channelCounts.release(peer)
            if let ordinal = (source as? ByteStreamWriter)?.ordinal { forgetStreamEndpoint(writer: ordinal, of: peer) }
        }
        return source
    }

    /// The mux ended the peer's channel: its endpoint goes, and its place among the session's
    /// incoming resources.
    @discardableResult
    private func dropInbound(_ channel: UInt32, of link: EngineState.Link) -> (any InboundChannel)? {
        guard let sink = link.mux?.inbound.removeValue(forKey: channel) else { return nil }
        link.mux?.transfers[channel] = nil
        link.mux?.incomingSends[channel] = nil
        if sink is ResourceReceiver { incomingResources.subtract(1, ordering: .relaxed) }
        if let ordinal = (sink as? ByteStreamReader)?.ordinal, let peer = link.member?.identifier {
            forgetStreamEndpoint(reader: ordinal, of: peer)
        }
        return sink
    }

    func channelReady(_ channel: UInt32, on id: LinkID) {
        guard let link = state.value.links[id], let mux = link.mux else { return }
        channels(of: mux) { $0.markReady(channel) }
        pump(link, peer: id)
    }

    func channelTaken(_ taken: [UInt32: Int], on id: LinkID) {
        guard let link = state.value.links[id], let mux = link.mux, let connection = link.socket else { return }
        writeChannelFrames(channels(of: mux) { $0.taken(taken) } ?? [], on: connection)
    }

    func channelSend(_ frame: Frame, on id: LinkID) {
        guard let link = state.value.links[id], let mux = link.mux, let connection = link.socket else { return }
        let channel = frame.channel
        guard let ours = channels(of: mux, { mux in mux.weSend(frame).map { ($0, mux.isOurs(channel)) } }) ?? nil else { return }
        // It goes: remembered before the channel's endpoint (and what it was on) is dropped.
        rememberVerdict(frame, on: link, mux: mux)
        writeChannelFrame(frame, on: connection, flush: true)
        guard ours.0 else { return }
        if ours.1 { dropOutbound(channel, of: link) } else { dropInbound(channel, of: link) }
    }

    /// The link's `ChannelMux`, which the session core keeps in the link's record; nil once the
    /// link is no longer a member's.
    @discardableResult
    private func channels<Result>(of mux: LinkMultiplexer, _ body: (inout ChannelMux) -> Result) -> Result? {
        state.value.core.channels(on: mux.link, body)
    }

    func writeChannelFrames(_ frames: [Frame], on connection: any Channel) {
        for frame in frames { writeChannelFrame(frame, on: connection, flush: false) }
        if !frames.isEmpty { connection.flush() }
    }

    private func writeChannelFrame(_ frame: Frame, on connection: any Channel, flush: Bool) {
        let promise = connection.eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenFailure { [logger = configuration.logger] error in
            // A refusal here is a bug on our side (the peer would have closed): say so loudly.
            if let refusal = error as? SendRefusal, refusal.code == .channelRule {
                logger.error("channel frame refused", metadata: ["frame": "\(frame.type)", "why": "\(refusal)"])
            }
        }
        if flush { connection.writeAndFlush(frame, promise: promise) } else { connection.write(frame, promise: promise) }
    }

    // MARK: The peer's frames (on the loop)

    func channelFrameReceived(_ frame: Frame, on id: LinkID) {
        guard let link = state.value.links[id], let mux = link.mux, let peer = link.member, let connection = link.socket else { return }
        let interrupted = state.value.interruptedResources
        let decision = channels(of: mux) {
            $0.peerSent(frame, accepting: acceptsChannels, incomingResourcesInSession: incomingResources.load(ordering: .relaxed)) { offer in
                let send = Self.incomingSend(of: offer, from: peer, on: link)
                return ChannelMux.InterruptedResources(
                    waitingFromPeer: interrupted.waitingCount(from: peer.identifier), resumesOne: interrupted.resumesWaiting(send),
                    answeredFromMemory: interrupted.answersFromMemory(send, resumed: offer.resumed))
            }
        }
        switch decision {
        case nil:
            return  // the link is no longer a member's
        case .serve:
            pump(link, peer: id)
        case .takeStream(let channel, let name, let ordinal, let reply):
            let reader = ByteStreamReader(name: name, peer: peer, channel: channel, linkage: mux, ordinal: ordinal)
            mux.inbound[channel] = reader
            if let ordinal {
                // The peer resumes its kept streams before it opens any other (§7.10): one it
                // did not resume now never will be.
                failUnresumedReaders(of: peer.identifier, unboundSince: eventLoop.now)
                streamEndpoints(of: peer.identifier).readers[ordinal] = (reader, nil)
            }
            writeChannelFrames(reply, on: connection)
            onEvent(.streamOpened(reader))
        case .resumeStream(let channel, let ordinal, let reply):
            carryOn(ordinal, of: peer.identifier, on: channel, answer: reply, mux: mux)
        case .acknowledged(let channel, let acknowledgement):
            (mux.outbound[channel] as? ByteStreamWriter)?.acknowledged(
                released: acknowledgement.released, rewound: acknowledgement.rewound, answering: acknowledgement.answered)
            if acknowledgement.over { dropOutbound(channel, of: link) } else { pump(link, peer: id) }
        case .violation(let error):
            connection.triggerUserOutboundEvent(ConnectionCommand.abort(error), promise: nil)
        case .considerResource(let channel, let offer):
            take(offer, on: channel, link: link, mux: mux, peer: peer, connection: connection)
        case .refuse(_, let reason, let reply):
            if case .resourceOffer = frame {
                configuration.logger.info("refused a resource", metadata: ["peer": peer.logValue, "why": "\(reason)"])
            }
            writeChannelFrames(reply, on: connection)
        case .toOutbound(let channel, let ended):
            (ended ? dropOutbound(channel, of: link) : mux.outbound[channel])?.peerSent(frame)
        case .toInbound(let channel, let ended, let reply):
            (ended ? dropInbound(channel, of: link) : mux.inbound[channel])?.peerSent(frame)
            if let reply { writeChannelFrame(reply, on: connection, flush: true) }
        case .giveBack(let frames):
            writeChannelFrames(frames, on: connection)
        }
    }

    /// A resource offer within the limits: resumed from a kept partial, or stored in a new file.
    private func take(
        _ offer: ResourceOffer, on channel: UInt32, link: EngineState.Link, mux: LinkMultiplexer, peer: WirePeerID,
        connection: any Channel
    ) {
        let send = Self.incomingSend(of: offer, from: peer, on: link)
        // The offer may continue a transfer a lost link cut off (§7.9): the same one, for the app.
        switch state.value.interruptedResources.claimIncoming(send, resumed: offer.resumed) {
        case .cancelled?:
            writeChannelFrames(channels(of: mux) { $0.resourceRefused(channel) } ?? [], on: connection)
        case .completed(let transfer, let digest)?:
            // All of it had arrived before the link went; the sender did not hear the verdict.
            mux.inbound[channel] = CompletedResourceEcho(channel: channel, digest: digest, verdictOf: transfer, linkage: mux)
            // Its verdict may go with a link again: remembered as the first was.
            mux.transfers[channel] = transfer
            mux.incomingSends[channel] = send
            writeChannelFrames(channels(of: mux) { $0.resourceTaken(channel, offset: offer.size) } ?? [], on: connection)
        case .waiting(let transfer, _)? where transfer.outcome != nil:
            // The app ended it meanwhile (its cancel raced the loss): refused, as a cancel would be.
            incomingResources.subtract(1, ordering: .relaxed)
            writeChannelFrames(channels(of: mux) { $0.resourceRefused(channel) } ?? [], on: connection)
        case .waiting(let transfer, let cutOff)?:
            // Taken once the cut-off receiver has kept its partial (a write may still be landing);
            // meanwhile the offer waits unanswered.
            let id = mux.link
            cutOff.whenSettled { [weak self, eventLoop] in
                let engine = self
                eventLoop.execute {
                    guard let engine else { return }
                    guard let link = engine.state.value.links[id], link.mux === mux, let connection = link.socket else {
                        // That link went too: the transfer waits for the next one, if the member recovers.
                        guard engine.core.isRecoverableMember(peer.identifier) else {
                            return engine.failInterrupted(incoming: [.waiting(transfer, cutOff)])
                        }
                        return engine.state.value.interruptedResources.park(
                            .waiting(transfer, cutOff), send: send, now: engine.eventLoop.now)
                    }
                    engine.store(offer, on: channel, send: send, resuming: transfer, link: link, mux: mux, peer: peer, connection: connection)
                }
            }
        case nil:
            store(offer, on: channel, send: send, resuming: nil, link: link, mux: mux, peer: peer, connection: connection)
        }
    }

    /// Which send of the peer's the offer is: the key of its partials of this content
    /// (docs/PROTOCOL.md §7.8) and the send's ID (§7.9).
    static func incomingSend(of offer: ResourceOffer, from peer: WirePeerID, on link: EngineState.Link) -> InterruptedResources.Send {
        let key = ResumeStore.Key(peer: peer.identifier, fingerprint: link.peerFingerprint, transferID: offer.transferID, size: offer.size)
        return InterruptedResources.Send(key, id: offer.sendID)
    }

    /// Takes the offer into a file: resumed from a kept partial, or a new one; `interrupted` is
    /// the app's transfer it continues, if any.
    private func store(
        _ offer: ResourceOffer, on channel: UInt32, send: InterruptedResources.Send, resuming interrupted: ResourceTransfer?,
        link: EngineState.Link, mux: LinkMultiplexer, peer: WirePeerID, connection: any Channel
    ) {
        let limits = configuration.channels
        let key = send.key
        let (kept, expired) = resumeStore.withLock { $0.take(key, now: eventLoop.now) }
        removeKept(expired)
        armResumeExpiry()
        let reopened = kept.flatMap { reopen($0) }
        let resumed = reopened == nil ? nil : kept
        let file: OpenFile
        let path: String
        do {
            if let reopened, let resumed {
                (file, path) = (reopened, resumed.path)
            } else {
                try prepareResourceDirectory(limits.resourceDirectory)
                path = limits.resourceDirectory + "/.mpcp-" + Bytes16.random().description + ".part"
                file = try OpenFile.create(path)
            }
        } catch {
            configuration.logger.info("refused a resource", metadata: ["peer": peer.logValue, "why": "cannot store it: \(error)"])
            if let interrupted {
                incomingResources.subtract(1, ordering: .relaxed)
                let failure = TransferError(.storageFailure, detail: "\(error)")
                if interrupted.finished(.failure(failure)) { onEvent(.resourceFinished(interrupted, .failure(failure))) }
            }
            return writeChannelFrames(channels(of: mux) { $0.resourceRefused(channel) } ?? [], on: connection)
        }
        let offset = resumed?.length ?? 0
        // An interrupted transfer stayed counted while it waited.
        if interrupted == nil { incomingResources.add(1, ordering: .relaxed) }
        let transfer = interrupted ?? ResourceTransfer(name: offer.name, peer: peer, size: offer.size, direction: .incoming)
        let receiver = ResourceReceiver(
            channel: channel, offer: offer, peer: peer, path: path, file: file, resumed: resumed,
            pool: fileIOPool, eventLoop: eventLoop, linkage: mux,
            keepPartial: { [weak self] partial, resumed in
                guard let self else { return FileNames.remove(partial.path) }
                keepPartial(partial, for: key, resumed: resumed)
            },
            writeFault: storageFault.withLockedValue { $0 },
            onProgress: { transfer.progressed(to: $0) },
            onCompletion: { [onEvent] result in
                if transfer.finished(result.map { Optional($0) }) { onEvent(.resourceFinished(transfer, result)) }
            })
        transfer.setCancelHandler { receiver.cancel() }
        mux.inbound[channel] = receiver
        mux.transfers[channel] = transfer
        mux.incomingSends[channel] = send
        writeChannelFrames(channels(of: mux) { $0.resourceTaken(channel, offset: offset) } ?? [], on: connection)
        transfer.progressed(to: offset)
        if interrupted == nil { onEvent(.resourceStarted(transfer)) }
    }

    /// A kept partial's file, cut to the length its hash state covers. Nil, and the file gone,
    /// when it cannot be opened or is shorter than that (its hash state would not match): the
    /// transfer then starts over rather than re-reading anything.
    private func reopen(_ partial: ResumeStore.Partial) -> OpenFile? {
        if let file = try? OpenFile.openForUpdate(partial.path),
            let size = try? file.size(), size >= partial.length, (try? file.truncate(to: partial.length)) != nil
        {
            return file
        }
        FileNames.remove(partial.path)
        return nil
    }

    /// A receiver cut off by a lost connection, on any thread. Kept before the receiver reports,
    /// so a resend right after finds it.
    func keepPartial(_ partial: ResumeStore.Partial, for key: ResumeStore.Key, resumed: ResumeStore.Partial?) {
        removeKept(resumeStore.withLock { $0.keep(partial, for: key, resumed: resumed, now: eventLoop.now) })
        armResumeExpiry()
    }

    /// Sets the timer for the store's next expiry, so kept files go on time with no traffic;
    /// cancels it once nothing is kept. The store decides what expires; this deletes the files.
    func armResumeExpiry() {
        guard eventLoop.inEventLoop else {
            eventLoop.execute { [self] in armResumeExpiry() }
            return
        }
        let state = state.value
        let next = resumeStore.withLock { $0.nextExpiry }
        guard state.resumeExpiry?.deadline != next else { return }
        state.resumeExpiry?.task.cancel()
        state.resumeExpiry = next.map { deadline in
            // Weak: a timer up to a lifetime away must not keep a dropped engine alive.
            let task = eventLoop.scheduleTask(deadline: deadline) { [weak self] in
                guard let self else { return }
                self.state.value.resumeExpiry = nil
                removeKept(resumeStore.withLock { $0.expire(now: eventLoop.now) })
                armResumeExpiry()
            }
            return (deadline, task)
        }
    }

    /// Deletes the files of partials the store let go.
    func removeKept(_ partials: [ResumeStore.Partial]) {
        for partial in partials { FileNames.remove(partial.path) }
    }

    /// A new member's connection: raise its connection window from the protocol's initial one to ours.
    func widenConnectionWindow(of link: EngineState.Link) {
        guard let mux = link.mux, let frame = channels(of: mux, { $0.connectionWindowWidening }) ?? nil, let connection = link.socket
        else { return }
        writeChannelFrame(frame, on: connection, flush: true)
    }

    /// The connection ended: every channel on it fails (incoming resources keep their bytes for
    /// resuming), except the resources of a member that recovers (docs/PROTOCOL.md §7.9), which
    /// wait for its resumed link. The link's ChannelMux goes with the core's record of the link.
    func failChannels(of link: EngineState.Link) {
        guard let mux = link.mux else { return }
        let (outbound, inbound, transfers, sends) = (mux.outbound, mux.inbound, mux.transfers, mux.incomingSends)
        mux.outbound = [:]
        mux.inbound = [:]
        mux.transfers = [:]
        mux.incomingSends = [:]
        link.mux = nil
        let peer = link.member?.identifier
        let recovering = peer.map { core.isRecoverableMember($0) } ?? false
        let interrupted = state.value.interruptedResources
        let error = TransferError(.connectionLost)
        var parked = false
        let streams = peer.flatMap { core.streams(of: $0) }
        for (channel, source) in outbound.sorted(by: { $0.key < $1.key }) {
            if recovering, let peer, let sender = source as? ResourceSender, let transfer = transfers[channel], sender.interrupt() {
                parkInterrupted(sender, transfer: transfer, to: peer, accepted: sender.wasAccepted, cutOff: true)
                parked = true
                continue
            }
            if let writer = source as? ByteStreamWriter, let ordinal = writer.ordinal, let peer {
                // Carried on by another link already: not this one's to end.
                guard writer.isBound(to: mux) else { continue }
                // The peer may not have all of it yet: it waits for the resumed link (§7.10).
                if recovering, let streams, streams.ledger.keeps(ordinal) {
                    writer.interrupt()
                    continue
                }
                streams?.ledger.forget(ordinal)
                forgetStreamEndpoint(writer: ordinal, of: peer)
            }
            if let peer { channelCounts.release(peer) }
            source.failed(error)
        }
        for (_, sink) in inbound {
            guard let reader = sink as? ByteStreamReader, let ordinal = reader.ordinal, let peer, reader.isBound(to: mux) else { continue }
            if recovering, let streams, streams.ledger.isReading(ordinal), reader.isReading {
                state.value.memberStreams[peer]?.readers[ordinal]?.unboundSince = eventLoop.now
                continue
            }
            streams?.ledger.peerStreamEnded(ordinal)
            forgetStreamEndpoint(reader: ordinal, of: peer)
            reader.failed(error)
        }
        for (channel, sink) in inbound {
            if let reader = sink as? ByteStreamReader, reader.ordinal != nil { continue }  // above
            if recovering, let receiver = sink as? ResourceReceiver, let transfer = transfers[channel], let send = sends[channel],
                let digest = receiver.verifyingDigest
            {
                // Being verified: it ends as it would have; a resuming offer learns the verdict.
                interrupted.park(.completed(transfer, digest), send: send, now: eventLoop.now)
            } else if recovering, let echo = sink as? CompletedResourceEcho, let transfer = transfers[channel], let send = sends[channel] {
                // Answering a resumed offer from memory: the memory stays for the next one.
                interrupted.park(.completed(transfer, echo.digest), send: send, now: eventLoop.now)
            } else if recovering, let peer, let receiver = sink as? ResourceReceiver, let transfer = transfers[channel],
                let send = sends[channel]
            {
                // The app's cancel from now on ends the parked transfer, not the cut-off receiver.
                transfer.setCancelHandler { [weak self, eventLoop] in
                    let engine = self
                    eventLoop.execute { engine?.cancelInterrupted(incoming: transfer, from: peer) }
                }
                if receiver.interrupt() {
                    // It stays counted among the session's incoming resources while it waits.
                    interrupted.park(.waiting(transfer, receiver), send: send, now: eventLoop.now)
                    parked = true
                    continue
                }
            }
            if sink is ResourceReceiver { incomingResources.subtract(1, ordering: .relaxed) }
            sink.failed(error)
        }
        // The member may be carried by another link already (this one was superseded).
        if parked, let peer, core.activeLink(to: peer) != nil { resumeInterruptedResources(of: peer) }
    }

    // MARK: Resources across a lost link (docs/PROTOCOL.md §7.9)

    /// Our resource waits for the member's resumed link; its place among our 64 stays taken
    /// until it is offered again or fails.
    /// `accepted`: the peer accepted its offer on a link (it may have a verdict on it), so it is
    /// offered again RESUMED. One sent while the link was down, or whose offer went unanswered,
    /// is not: the peer may never have read that offer, and a verdict it remembers for the same
    /// content would be an earlier send's.
    private func parkInterrupted(_ sender: ResourceSender, transfer: ResourceTransfer, to peer: Bytes16, accepted: Bool, cutOff: Bool) {
        var source = sender.source
        if accepted { source.resumed = true }
        state.value.interruptedResources.park(.init(source: source, transfer: transfer), for: peer, cutOff: cutOff)
        transfer.setCancelHandler { [weak self, eventLoop] in
            let engine = self
            eventLoop.execute { engine?.cancelInterrupted(outgoing: transfer, to: peer) }
        }
    }

    /// A verdict we send on the peer's resource (RESOURCE_RECEIVED, or RESOURCE_CANCEL 2 or 3
    /// after its RESOURCE_COMPLETE) may go with a lost link; the member's sender then offers the
    /// transfer again, RESUMED, and the verdict answers that offer instead of a second transfer
    /// (docs/PROTOCOL.md §7.9). Kept among the member's interrupted transfers, the latest few.
    private func rememberVerdict(_ frame: Frame, on link: EngineState.Link, mux: LinkMultiplexer) {
        switch frame {
        case .resourceReceived, .resourceCancel(_, .integrityFailure), .resourceCancel(_, .storageFailure): break
        default: return
        }
        let channel = frame.channel
        guard let peer = link.member?.identifier, core.isRecoverableMember(peer), let transfer = mux.transfers[channel],
            let send = mux.incomingSends[channel]
        else { return }
        let digest: SHA256Digest? = switch mux.inbound[channel] {
        case let receiver as ResourceReceiver: receiver.announcedDigest
        case let echo as CompletedResourceEcho: echo.digest
        default: nil
        }
        guard let digest else { return }
        state.value.interruptedResources.park(.completed(transfer, digest), send: send, now: eventLoop.now)
    }

    /// The member is carried by a link again: our interrupted resources are offered on it (the
    /// receiver resumes each from its kept partial); the peer's have until the grace period
    /// passes to be offered again, then fail.
    func resumeInterruptedResources(of peer: Bytes16) {
        let interrupted = state.value.interruptedResources
        for send in interrupted.takeOutgoing(for: peer) {
            openOutbound(resourceSender(send.source, for: send.transfer), to: peer, transfer: send.transfer)
        }
        guard interrupted.incomingCount(from: peer) > 0 else { return }
        let resumedAt = eventLoop.now
        eventLoop.scheduleTask(deadline: resumedAt + configuration.recovery.grace) { [weak self] in
            guard let self else { return }
            failInterrupted(incoming: state.value.interruptedResources.takeIncoming(for: peer, parkedBy: resumedAt))
        }
    }

    /// The member left: what waited for it fails.
    func failInterruptedResources(of peer: Bytes16) {
        let interrupted = state.value.interruptedResources
        for send in interrupted.takeOutgoing(for: peer) {
            channelCounts.release(peer)
            send.transfer.finished(.failure(TransferError(.connectionLost)))
        }
        failInterrupted(incoming: interrupted.takeIncoming(for: peer))
    }

    func failInterrupted(incoming: [InterruptedResources.Incoming]) {
        let error = TransferError(.connectionLost)
        for case .waiting(let transfer, _) in incoming {
            incomingResources.subtract(1, ordering: .relaxed)
            if transfer.finished(.failure(error)) { onEvent(.resourceFinished(transfer, .failure(error))) }
        }
    }

    private func cancelInterrupted(outgoing transfer: ResourceTransfer, to peer: Bytes16) {
        guard state.value.interruptedResources.removeOutgoing(transfer, for: peer) else { return }
        channelCounts.release(peer)
        transfer.finished(.failure(TransferError(.cancelled)))
    }

    /// The application cancelled a transfer that waits for its sender: its partial goes, and the
    /// offer that would resume it is refused.
    private func cancelInterrupted(incoming transfer: ResourceTransfer, from peer: Bytes16) {
        guard let (send, cutOff) = state.value.interruptedResources.cancelIncoming(transfer, peer: peer) else { return }
        let key = send.key
        incomingResources.subtract(1, ordering: .relaxed)
        // Once the cut-off receiver has kept it (a write may still be landing).
        cutOff.whenSettled { [weak self, eventLoop] in
            let engine = self
            eventLoop.execute {
                guard let engine else { return }
                let (kept, expired) = engine.resumeStore.withLock { $0.take(key, now: eventLoop.now) }
                engine.removeKept(expired + (kept.map { [$0] } ?? []))
                engine.armResumeExpiry()
            }
        }
        let error = TransferError(.cancelled)
        if transfer.finished(.failure(error)) { onEvent(.resourceFinished(transfer, .failure(error))) }
    }

    /// Makes the resource directory if needed and checks that it is ours alone: a directory
    /// someone else made (in /tmp, say) could let them swap a verified file. The first time, it
    /// also removes files of interrupted transfers older than they may be kept.
    private func prepareResourceDirectory(_ path: String) throws(FileIOError) {
        var components = ""
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            components += "/" + part
            if mkdir(components, 0o700) != 0 && errno != EEXIST { throw FileIOError(operation: "mkdir", code: errno) }
        }
        var info = stat()
        guard lstat(path, &info) == 0 else { throw FileIOError(operation: "lstat", code: errno) }
        guard (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == getuid(), info.st_mode & 0o077 == 0 else {
            throw FileIOError(operation: "resource directory (not a directory of ours alone, mode 0700)", code: EPERM)
        }
        guard resourceDirectorySwept.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        let cutoff = time(nil) - Int(configuration.channels.resumeLifetime.nanoseconds / 1_000_000_000)
        guard let directory = opendir(path) else { return }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasPrefix(".mpcp-"), name.hasSuffix(".part") else { continue }
            var file = stat()
            if lstat(path + "/" + name, &file) == 0, file.st_mtim.tv_sec < cutoff { FileNames.remove(path + "/" + name) }
        }
    }
}

/// Our open channels per peer (at most 64 each, docs/PROTOCOL.md §7.6), from any thread.
final class ChannelCounts: Sendable {
    private let counts = Mutex<[Bytes16: Int]>([:])

    func reserve(_ peer: Bytes16) -> Bool {
        counts.withLock { counts in
            guard counts[peer, default: 0] < WireLimits.maxChannelsOpenedPerSide else { return false }
            counts[peer, default: 0] += 1
            return true
        }
    }

    func release(_ peer: Bytes16) {
        counts.withLock { counts in
            let left = counts[peer, default: 0] - 1
            counts[peer] = left > 0 ? left : nil
        }
    }

    func count(for peer: Bytes16) -> Int { counts.withLock { $0[peer, default: 0] } }
}

/// One connection's channel objects and the hops from their threads onto the loop; what is
/// decided about the channels is the link's `ChannelMux`, in the session core's record of it.
final class LinkMultiplexer: ChannelLinkage, @unchecked Sendable {
    // Loop-only state (the engine touches it on its event loop only).
    var outbound: [UInt32: any OutboundChannel] = [:]
    var inbound: [UInt32: any InboundChannel] = [:]
    /// The application's side of each resource channel, both ways (channel numbers of the two
    /// sides never collide, §7.6).
    var transfers: [UInt32: ResourceTransfer] = [:]
    /// Which send each incoming resource is (its content's key and send ID, §7.9).
    var incomingSends: [UInt32: InterruptedResources.Send] = [:]

    private weak var engine: SessionEngine?
    private let eventLoop: any EventLoop
    let link: LinkID
    /// Bytes taken by readers, gathered from any thread and returned in one hop.
    private let taken = Mutex<(bytes: [UInt32: Int], scheduled: Bool)>(([:], false))

    init(engine: SessionEngine, link: LinkID) {
        self.engine = engine
        eventLoop = engine.eventLoop
        self.link = link
    }

    func channelReady(_ channel: UInt32) {
        eventLoop.execute { [weak engine, link] in engine?.channelReady(channel, on: link) }
    }

    func channelTaken(_ bytes: Int, on channel: UInt32) {
        let schedule = taken.withLock { taken -> Bool in
            taken.bytes[channel, default: 0] += bytes
            defer { taken.scheduled = true }
            return !taken.scheduled
        }
        guard schedule else { return }
        eventLoop.execute { [weak self] in self?.returnTaken() }
    }

    private func returnTaken() {
        let batch = taken.withLock { taken in
            defer { taken = ([:], false) }
            return taken.bytes
        }
        engine?.channelTaken(batch, on: link)
    }

    func channelSend(_ frame: Frame) {
        eventLoop.execute { [weak engine, link] in engine?.channelSend(frame, on: link) }
    }
}
