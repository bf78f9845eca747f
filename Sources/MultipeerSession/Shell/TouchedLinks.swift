import MultipeerProtocol
/// The links one drain of the send queue wrote to, each once, in the order first written.
/// Most drains touch one link, which is held without allocating; the rest go in an array, since
/// a session has at most a few peers.
struct TouchedLinks {
    private var first: (id: LinkID, link: EngineState.Link)?
    private var others: [(id: LinkID, link: EngineState.Link)] = []

    mutating func insert(_ link: EngineState.Link, id: LinkID) {
        guard let first else {
            first = (id, link)
            return
        }
        guard first.link !== link, !others.contains(where: { $0.link === link }) else { return }
        others.append((id, link))
    }

    func forEach(_ body: (LinkID, EngineState.Link) -> Void) {
        guard let first else { return }
        body(first.id, first.link)
        for (id, link) in others { body(id, link) }
    }
}
