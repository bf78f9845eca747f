import Foundation
import MultipeerConnectivity

/// Foundation's Progress on Linux takes no lock: the session updates an incoming transfer's
/// Progress on its network thread, so it is read there too (a task preferring the session's
/// executor), never from another thread.
private struct SessionProgress: @unchecked Sendable {
    let progress: Progress
}

extension TransferBoard {
    /// Copies `progress` into the board every 100 ms while the transfer is shown.
    func follow(_ key: String, _ progress: Progress, of session: MCSession) {
        let watched = SessionProgress(progress: progress)
        Task(executorPreference: session.taskExecutor) { [weak self] in
            while let self, self.isShowing(key) {
                self.update(key, done: watched.progress.completedUnitCount, total: watched.progress.totalUnitCount)
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }
}
