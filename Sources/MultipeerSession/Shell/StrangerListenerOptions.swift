import NIOCore
import NIOPosix
import MultipeerProtocol

/// Socket options for a listener that strangers may flood (the session's and the advertiser's).
package enum StrangerListenerOptions {
    /// The accept queue (the kernel caps it at net.core.somaxconn). A full queue drops SYNs, and
    /// a real peer's dropped SYN waits a second for its retransmission, so the queue is made deep
    /// enough to hold a flood while the listener sheds it. (TCP_DEFER_ACCEPT, which would keep
    /// idle strangers in the kernel, was tried: they then arrive in bursts when their deferral
    /// ends, and a real peer met such a burst.)
    package static let backlog = 4_096

    /// One accept per turn of the event loop, so connections already accepted are read between
    /// accepts: under a flood, four at a time let a real peer be shed as the oldest silent one
    /// before its preamble, already in the kernel's buffer, was read.
    package static let acceptsPerRead: UInt = 1

    package static func apply(to bootstrap: ServerBootstrap) -> ServerBootstrap {
        bootstrap.serverChannelOption(.backlog, value: Int32(backlog)).serverChannelOption(.maxMessagesPerRead, value: acceptsPerRead)
    }

    /// The server channel's handlers: accepts paced by `AcceptPacing`.
    package static func addHandlers(to listener: any Channel) throws {
        try listener.pipeline.syncOperations.addHandler(AcceptPacingHandler())
    }
}
