import Foundation
import Synchronization

/// Transfers under way, shown as progress bars on a terminal (redrawn ten times a second) or as
/// a plain line at every tenth otherwise, and a closing line for each.
final class TransferBoard: Sendable {
    private struct Transfer {
        let label: String
        let started = ContinuousClock.now
        var done: Int64 = 0
        var total: Int64 = 0
        var tenthsShown = 0
        var changed = true
    }

    private let console: Console
    private let transfers = Mutex<[String: Transfer]>([:])
    private let ticker = Mutex<Task<Void, Never>?>(nil)

    init(console: Console) {
        self.console = console
    }

    /// Starts showing a transfer under `key` (unique while it runs).
    func begin(_ key: String, label: String, total: Int64 = 0) {
        transfers.withLock { $0[key] = Transfer(label: label, total: total) }
        startTicking()
    }

    func update(_ key: String, done: Int64, total: Int64) {
        transfers.withLock { transfers in
            guard var transfer = transfers[key], transfer.done != done || transfer.total != total else { return }
            transfer.done = done
            transfer.total = total
            transfer.changed = true
            transfers[key] = transfer
        }
    }

    func isShowing(_ key: String) -> Bool { transfers.withLock { $0[key] != nil } }

    /// Stops showing the transfer and prints its outcome; `succeeded` adds size, time and rate.
    func finish(_ key: String, _ message: String, succeeded: Bool) {
        guard let transfer = transfers.withLock({ $0.removeValue(forKey: key) }) else { return console.say(message) }
        console.setStatus(key, nil)
        guard succeeded else { return console.say(message) }
        let seconds = max((ContinuousClock.now - transfer.started) / .seconds(1), 0.001)
        let rate = Double(transfer.total) / seconds
        console.say(message + " (\(Terminal.bytes(transfer.total)) in \(String(format: "%.1f", seconds)) s, \(Terminal.bytes(Int64(rate)))/s)")
    }

    private func startTicking() {
        ticker.withLock { ticker in
            guard ticker == nil else { return }
            ticker = Task { [weak self] in
                while !Task.isCancelled, let self {
                    self.draw()
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
        }
    }

    private func draw() {
        let changed = transfers.withLock { transfers -> [(String, Transfer)] in
            var changed: [(String, Transfer)] = []
            for (key, transfer) in transfers where transfer.changed {
                changed.append((key, transfer))
                transfers[key]?.changed = false
            }
            return changed
        }
        for (key, transfer) in changed.sorted(by: { $0.0 < $1.0 }) {
            let fraction = transfer.total > 0 ? min(Double(transfer.done) / Double(transfer.total), 1) : 0
            if console.drawsBars {
                console.setStatus(key, Self.bar(transfer.label, fraction: fraction, done: transfer.done, total: transfer.total))
            } else {
                let tenths = Int(fraction * 10)
                guard tenths > transfer.tenthsShown, tenths < 10 else { continue }
                transfers.withLock { $0[key]?.tenthsShown = tenths }
                console.say("progress \(transfer.label) \(tenths * 10)% \(Terminal.bytes(transfer.done)) of \(Terminal.bytes(transfer.total))")
            }
        }
    }

    /// `label [########------------] 40% 4.0 MiB/10.0 MiB`
    static func bar(_ label: String, fraction: Double, done: Int64, total: Int64, width: Int = 20) -> String {
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        return "\(label) [\(bar)] \(Int(fraction * 100))% \(Terminal.bytes(done))/\(Terminal.bytes(total))"
    }

    deinit {
        ticker.withLock { $0 }?.cancel()
    }
}
