import MultipeerCrypto
import MultipeerProtocol
import MultipeerWire
import NIOCore

// Streams across a lost link (docs/PROTOCOL.md §7.10): the shell that keeps a member's stream
// endpoints by ordinal while its link is down, and carries them on to the resumed one. What a
// STREAM_RESUME or STREAM_ACK means, and which streams are kept, is the member's `StreamLedger`.
extension SessionEngine {
    func streamEndpoints(of peer: Bytes16) -> MemberStreamEndpoints {
        if let endpoints = state.value.memberStreams[peer] { return endpoints }
        let endpoints = MemberStreamEndpoints()
        state.value.memberStreams[peer] = endpoints
        return endpoints
    }

    func forgetStreamEndpoint(writer ordinal: UInt32, of peer: Bytes16) {
        guard let endpoints = state.value.memberStreams[peer] else { return }
        endpoints.writers[ordinal] = nil
        if endpoints.isEmpty { state.value.memberStreams[peer] = nil }
    }

    func forgetStreamEndpoint(reader ordinal: UInt32, of peer: Bytes16) {
        guard let endpoints = state.value.memberStreams[peer] else { return }
        endpoints.readers[ordinal] = nil
        if endpoints.isEmpty { state.value.memberStreams[peer] = nil }
    }

    /// A stream the application opens while the member's link is down: it takes its ordinal now
    /// and opens on the resumed link (STREAM_RESUME, new to the peer).
    func parkNewStream(_ writer: ByteStreamWriter, to peer: Bytes16) {
        guard !writer.hasFailed else {
            channelCounts.release(peer)  // cancelled before it opened: the peer hears nothing
            return
        }
        guard let ordinal = core.streams(of: peer)?.ledger.opened() else {
            channelCounts.release(peer)
            writer.failed(TransferError(.tooManyChannels))
            return
        }
        writer.retain(as: ordinal)
        streamEndpoints(of: peer).writers[ordinal] = writer
    }

    /// The peer continues its stream `ordinal` on `channel`: the kept reader reads on from there,
    /// and `answer` (our count, our window) goes once the application has read what the reader
    /// held from earlier connections. When the application cancelled the reader while the link
    /// was down, the stream is reset instead (§7.10: it ended here).
    func carryOn(_ ordinal: UInt32, of peer: Bytes16, on channel: UInt32, answer: [Frame], mux: LinkMultiplexer) {
        let id = mux.link
        guard let entry = state.value.memberStreams[peer]?.readers[ordinal] else {
            channelSend(.streamReset(channel: channel, code: .cancelled), on: id)
            return
        }
        mux.inbound[channel] = entry.reader
        state.value.memberStreams[peer]?.readers[ordinal]?.unboundSince = nil
        let rebound = entry.reader.rebind(channel: channel, linkage: mux) { [weak self, eventLoop] in
            let engine = self
            eventLoop.execute {
                // Still this link's, still open here (a cancel since would have reset it).
                guard let engine, let link = engine.state.value.links[id], link.mux === mux, let connection = link.socket,
                    engine.core.channels(on: id, { $0.isOpen(channel) }) == true
                else { return }
                engine.writeChannelFrames(answer, on: connection)
            }
        }
        guard rebound else {
            channelSend(.streamReset(channel: channel, code: .cancelled), on: id)
            return
        }
    }

    /// The member is carried by link `id` again: each stream of ours it keeps goes on there from
    /// the peer's count (STREAM_RESUME first, in order of ordinals, before any STREAM_OPEN); the
    /// peer's have a grace period to be resumed, then fail.
    func resumeStreams(of peer: Bytes16, on id: LinkID) {
        guard let streams = core.streams(of: peer), let endpoints = state.value.memberStreams[peer],
            let link = state.value.links[id], let mux = link.mux, let connection = link.socket
        else { return }
        for ordinal in streams.ledger.keptOrdinals {
            guard let writer = endpoints.writers[ordinal] else {
                streams.ledger.forget(ordinal)
                continue
            }
            // Cancelled while the link was down: its reset could not go, so it follows the resume.
            if writer.hasFailed { streams.ledger.ended(ordinal, .reset) }
            guard let (channel, frames) = core.channels(on: id, { $0.resumeStream(ordinal, name: writer.name) }) ?? nil else {
                // Cannot happen (a kept stream keeps its place among our 64), and skipping its
                // ordinal would put every later one ahead of the peer's count: the link goes.
                let error = ConnectionError(.tls(SecurityError(.internalError, "no channel for kept stream \(ordinal)")))
                connection.triggerUserOutboundEvent(ConnectionCommand.abort(error), promise: nil)
                return
            }
            _ = writer.bind(channel: channel, linkage: mux)
            mux.outbound[channel] = writer
            writeChannelFrames(frames, on: connection)
        }
        let resumedAt = eventLoop.now
        guard endpoints.readers.values.contains(where: { $0.unboundSince != nil }) else { return }
        eventLoop.scheduleTask(deadline: resumedAt + configuration.recovery.grace) { [weak self] in
            self?.failUnresumedReaders(of: peer, unboundSince: resumedAt)
        }
    }

    /// The peer did not resume these within the grace period after the resumption (§7.10).
    func failUnresumedReaders(of peer: Bytes16, unboundSince resumedAt: NIODeadline) {
        // Suspended again: the next resumption gives the peer its own grace period.
        guard core.activeLink(to: peer) != nil, let endpoints = state.value.memberStreams[peer] else { return }
        for (ordinal, entry) in endpoints.readers {
            guard let since = entry.unboundSince, since <= resumedAt else { continue }
            core.streams(of: peer)?.ledger.peerStreamEnded(ordinal)
            forgetStreamEndpoint(reader: ordinal, of: peer)
            entry.reader.failed(TransferError(.connectionLost))
        }
    }

    /// The member left: the streams that waited for its link fail (those on a link failed with it).
    func failKeptStreams(of peer: Bytes16) {
        guard let endpoints = state.value.memberStreams.removeValue(forKey: peer) else { return }
        let error = TransferError(.connectionLost)
        for writer in endpoints.writers.values {
            channelCounts.release(peer)
            writer.failed(error)
        }
        for entry in endpoints.readers.values { entry.reader.failed(error) }
    }
}
