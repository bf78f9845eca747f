import MultipeerProtocol
/// What an advertiser or browser needs of an engine: start on its sockets or daemon, stop with
/// goodbyes. Start and stop are called in order, one at a time.
protocol DiscoveryRunner: Sendable {
    func start() async throws(DiscoveryError)
    func stop() async
}

extension MDNSService: DiscoveryRunner {}
