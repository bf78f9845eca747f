import NIOCore
import MultipeerProtocol

/// On a listener's server channel: stops accepting for as long as `AcceptPacing` says, leaving
/// new connections in the kernel's accept queue, then reads again.
final class AcceptPacingHandler: ChannelInboundHandler {
    typealias InboundIn = any Channel

    private var pacing = AcceptPacing()
    private var resume: Scheduled<Void>?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Counted even while paused: AcceptBackoffHandler's retry may read then.
        if let until = pacing.accepted(now: context.eventLoop.now), resume == nil {
            context.channel.setOption(.autoRead, value: false).whenFailure { _ in }
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            resume = context.eventLoop.assumeIsolated().scheduleTask(deadline: until) {
                let (handler, context) = loopBound.value
                handler.resume = nil
                context.channel.setOption(.autoRead, value: true).whenFailure { _ in }
            }
        }
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        resume?.cancel()
        resume = nil
    }
}
