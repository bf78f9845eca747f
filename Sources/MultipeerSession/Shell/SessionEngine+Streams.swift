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
        guard let ordinal = core.streams(of: peer)?.ledger.opened() else {
            channelCounts.release(peer)
            writer.failed(TransferError(.tooManyChannels))
            return
        }
        writer.retain(as: ordinal)
        streamEndpoints(of: peer).writers[ordinal] = writer
    }

    /// The peer continues its stream `ordinal` on `channel`: the kept reader reads on from there,
    /// or, when the application cancelled it while the link was down, the stream is reset.
    func carryOn(_ ordinal: UInt32, of peer: Bytes16, on channel: UInt32, link: EngineState.Link, mux: LinkMultiplexer) {
        guard let entry = state.value.memberStreams[peer]?.readers[ordinal], entry.reader.rebind(channel: channel, linkage: mux) else {
            forgetStreamEndpoint(reader: ordinal, of: peer)
            channelSend(.streamReset(channel: channel, code: .cancelled), on: mux.link)
            return
        }
        mux.inbound[channel] = entry.reader
        state.value.memberStreams[peer]?.readers[ordinal]?.unboundSince = nil
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
                streams.ledger.forget(ordinal)
                forgetStreamEndpoint(writer: ordinal, of: peer)
                channelCounts.release(peer)
                writer.failed(TransferError(.connectionLost))
                continue
            }
            _ = writer.bind(channel: channel, linkage: mux)
            mux.outbound[channel] = writer
            for frame in frames { connection.write(frame, promise: nil) }
        }
        connection.flush()
        let resumedAt = eventLoop.now
        guard endpoints.readers.values.contains(where: { $0.unboundSince != nil }) else { return }
        eventLoop.scheduleTask(deadline: resumedAt + configuration.recovery.grace) { [weak self] in
            self?.failUnresumedReaders(of: peer, unboundSince: resumedAt)
        }
    }

    /// The peer did not resume these within the grace period after the resumption (§7.10).
    private func failUnresumedReaders(of peer: Bytes16, unboundSince resumedAt: NIODeadline) {
        guard let endpoints = state.value.memberStreams[peer] else { return }
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
