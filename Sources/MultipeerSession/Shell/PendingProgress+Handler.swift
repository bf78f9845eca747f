import NIOCore
import MultipeerProtocol

extension PendingProgress {
    /// A connection's progress as its handler knows it; none yet counts as least advanced.
    init(_ handler: ConnectionHandler?) {
        self.init(stage: handler?.establishmentProgress ?? 0, lastActivity: handler?.lastActivity ?? .distantPast)
    }
}
