import NIOPosix

/// One event loop for the server side and one for the client side, as multipeer-bench gives each
/// of its two sessions a network thread of its own.
struct Loops {
    let server = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let client = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    func shutdown() async {
        try? await server.shutdownGracefully()
        try? await client.shutdownGracefully()
    }
}
