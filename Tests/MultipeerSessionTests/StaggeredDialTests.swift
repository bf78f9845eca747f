import MultipeerWire
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// A dial's connects (docs/PROTOCOL.md §7.9: each starts 250 ms after the one before it began, or
/// at once when that one failed; the first TCP connection carries on), on an embedded loop whose
/// clock the test moves, with connects the test lands by hand.
@Suite("StaggeredDial: a dial's connects")
struct StaggeredDialTests {
    static func endpoint(_ host: UInt32) -> WireEndpoint { try! WireEndpoint(address: .ipv4(0x0A00_0000 + host), port: 7000) }

    /// Connects that land when the test says; a socket closed while connecting fails its
    /// connect, as NIO's do.
    final class Harness {
        let loop = EmbeddedEventLoop()
        var started: [WireEndpoint] = []
        var promises: [WireEndpoint: EventLoopPromise<any Channel>] = [:]
        var sockets: [WireEndpoint: EmbeddedChannel] = [:]
        private var closedSockets: Set<WireEndpoint> = []
        /// Sockets closed so far (an embedded channel completes its close on the loop's next run).
        var closed: Set<WireEndpoint> {
            loop.run()
            return closedSockets
        }
        var carried: [WireEndpoint] = []
        var failures: [WireEndpoint] = []
        var exhaustions = 0
        /// Endpoints with no socket address here.
        var unaddressable: Set<WireEndpoint> = []
        /// Endpoints whose socket opens only when the test says (the initializer runs later).
        var opensLate: Set<WireEndpoint> = []
        private var lateOpeners: [WireEndpoint: (any Channel) -> Void] = [:]
        var landing: (WireEndpoint) -> StaggeredDial.Landing = { _ in .carries }
        var dial: StaggeredDial!

        init(_ endpoints: [WireEndpoint], attemptDelay: TimeAmount? = .milliseconds(250)) {
            dial = StaggeredDial(
                endpoints: endpoints, attemptDelay: attemptDelay, eventLoop: loop,
                connect: { [unowned self] endpoint, opened in
                    guard !unaddressable.contains(endpoint) else { return nil }
                    started.append(endpoint)
                    let socket = EmbeddedChannel(loop: loop)
                    let promise = loop.makePromise(of: (any Channel).self)
                    sockets[endpoint] = socket
                    promises[endpoint] = promise
                    let this = NIOLoopBound(self, eventLoop: loop)
                    socket.closeFuture.whenComplete { _ in
                        this.value.closedSockets.insert(endpoint)
                        promise.fail(ChannelError.ioOnClosedChannel)
                    }
                    if opensLate.contains(endpoint) { lateOpeners[endpoint] = opened } else { opened(socket) }
                    return promise.futureResult
                },
                landed: { [unowned self] _, endpoint in
                    let landing = landing(endpoint)
                    if landing == .carries { carried.append(endpoint) }
                    return landing
                },
                exhausted: { [unowned self] in exhaustions += 1 },
                failed: { [unowned self] endpoint, _ in failures.append(endpoint) })
        }

        func succeed(_ endpoint: WireEndpoint) { promises[endpoint]!.succeed(sockets[endpoint]!) }
        func open(_ endpoint: WireEndpoint) { lateOpeners.removeValue(forKey: endpoint)!(sockets[endpoint]!) }
        func fail(_ endpoint: WireEndpoint) { promises[endpoint]!.fail(ChannelError.connectTimeout(.seconds(2))) }
        func advance(_ milliseconds: Int64) { loop.advanceTime(by: .milliseconds(milliseconds)) }
    }

    let a = endpoint(1)
    let b = endpoint(2)
    let c = endpoint(3)

    @Test func eachConnectStartsAnAttemptDelayAfterTheOneBeforeAndTheFirstUpCarries() {
        let dial = Harness([a, b, c])
        dial.dial.start()
        #expect(dial.started == [a])
        dial.advance(249)
        #expect(dial.started == [a])
        dial.advance(1)
        #expect(dial.started == [a, b])
        dial.advance(250)
        #expect(dial.started == [a, b, c])
        dial.succeed(b)
        #expect(dial.carried == [b])
        #expect(dial.closed == [a, c], "the others' connects close")
        #expect(dial.failures.isEmpty && dial.exhaustions == 0)
        #expect(dial.dial.isFinished)
    }

    @Test func aFailedConnectStartsTheNextAtOnceAndTheStaggerFollowsIt() {
        let dial = Harness([a, b, c])
        dial.dial.start()
        dial.advance(10)
        dial.fail(a)
        #expect(dial.started == [a, b])
        #expect(dial.failures == [a])
        dial.advance(240)
        #expect(dial.started == [a, b], "the next starts 250 ms after b began, not after a did")
        dial.advance(10)
        #expect(dial.started == [a, b, c])
    }

    @Test func withoutAnAttemptDelayTheNextWaitsForAFailure() {
        let dial = Harness([a, b], attemptDelay: nil)
        dial.dial.start()
        dial.advance(10_000)
        #expect(dial.started == [a])
        dial.fail(a)
        #expect(dial.started == [a, b])
    }

    @Test func everyConnectFailingEndsTheDialOnceTheLastHasLanded() {
        let dial = Harness([a, b])
        dial.dial.start()
        dial.advance(250)
        dial.fail(b)
        #expect(dial.exhaustions == 0, "a's connect is still under way")
        dial.fail(a)
        #expect(dial.exhaustions == 1)
        dial.advance(1_000)
        #expect(dial.exhaustions == 1 && dial.started == [a, b])
    }

    @Test func abandonClosesTheConnectsUnderWayAndStartsNoMore() {
        let dial = Harness([a, b, c])
        dial.dial.start()
        dial.advance(250)
        dial.dial.abandon()
        #expect(dial.closed == [a, b])
        dial.advance(1_000)
        #expect(dial.started == [a, b])
        #expect(dial.failures.isEmpty && dial.exhaustions == 0 && dial.carried.isEmpty)
    }

    /// A socket that had not opened when the dial was let go (it fails before its initializer,
    /// or has not run it yet) closes when its connect lands.
    @Test func aConnectLandingAfterAbandonIsClosed() {
        let dial = Harness([a])
        dial.opensLate = [a]
        dial.dial.start()
        dial.dial.abandon()
        #expect(dial.closed.isEmpty)
        dial.succeed(a)
        #expect(dial.closed == [a])
        #expect(dial.carried.isEmpty && dial.exhaustions == 0)
    }

    /// The initializer ran after the dial was let go (its connect still under way): the socket
    /// closes there and then, rather than when its connect lands.
    @Test func aSocketOpenedAfterAbandonIsClosedAtOnce() {
        let dial = Harness([a])
        dial.opensLate = [a]
        dial.dial.start()
        dial.dial.abandon()
        dial.open(a)
        #expect(dial.closed == [a])
        #expect(dial.carried.isEmpty && dial.exhaustions == 0 && dial.failures.isEmpty)
    }

    /// The last endpoint's connection could not carry the link either: the dial ends as failed.
    @Test func theLastConnectionThatCannotCarryTheLinkEndsTheDial() {
        let dial = Harness([a, b])
        dial.landing = { _ in .tryNext }
        dial.dial.start()
        dial.succeed(a)
        dial.succeed(b)
        #expect(dial.closed == [a, b])
        #expect(dial.exhaustions == 1 && dial.carried.isEmpty)
        #expect(dial.dial.isFinished)
    }

    @Test func aConnectionThatCannotCarryTheLinkClosesAndTheNextIsTried() {
        let dial = Harness([a, b])
        dial.landing = { $0 == dial.a ? .tryNext : .carries }
        dial.dial.start()
        dial.succeed(a)
        #expect(dial.closed == [a])
        #expect(dial.started == [a, b], "b starts at once")
        dial.succeed(b)
        #expect(dial.carried == [b])
    }

    @Test func aDialLetGoWhenItLandsClosesEverything() {
        let dial = Harness([a, b, c])
        dial.landing = { _ in .letGo }
        dial.dial.start()
        dial.advance(250)
        dial.succeed(a)
        #expect(dial.closed == [a, b])
        dial.advance(1_000)
        #expect(dial.started == [a, b])
        #expect(dial.exhaustions == 0 && dial.failures.isEmpty)
    }

    @Test func anEndpointWithoutAnAddressIsSkipped() {
        let dial = Harness([a, b])
        dial.unaddressable = [a]
        dial.dial.start()
        #expect(dial.started == [b])
        let none = Harness([a, b])
        none.unaddressable = [a, b]
        none.dial.start()
        #expect(none.started.isEmpty && none.exhaustions == 1)
    }
}

extension StaggeredDialTests.Harness {
    var a: WireEndpoint { StaggeredDialTests.endpoint(1) }
}
