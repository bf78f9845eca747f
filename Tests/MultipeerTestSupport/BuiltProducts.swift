import Foundation

/// The package's executables, built next to the test bundle by `swift build --build-tests`.
public enum BuiltProducts {
    public struct Missing: Error, CustomStringConvertible {
        public let description: String
    }

    public static var directory: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    }

    public static func executable(_ name: String) throws -> URL {
        let url = directory.appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw Missing(description: "\(name) not built at \(url.path); run swift build --build-tests first")
        }
        return url
    }

    /// A program that did not finish in the time it was given; it was killed.
    public struct TimedOut: Error, CustomStringConvertible {
        public let description: String
    }

    /// Runs a program to completion on a thread of its own; returns its exit status and everything
    /// it printed. One that runs longer than `seconds` is killed and the call throws `TimedOut`.
    public static func run(
        _ executable: URL, _ arguments: [String], in directory: URL? = nil, seconds: Double = 300
    ) async throws -> (status: Int32, output: String) {
        try await onOwnThread { try runBlocking(executable, arguments, in: directory, seconds: seconds) }
    }

    /// `run` for places that cannot wait (a `defer`): it holds the calling thread until the child ends.
    public static func runBlocking(
        _ executable: URL, _ arguments: [String], in directory: URL? = nil, seconds: Double = 300
    ) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = directory }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let watchdog = Watchdog(process)
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { watchdog.fire() }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard watchdog.disarm() else {
            throw TimedOut(description: "\(executable.lastPathComponent) \(arguments.joined(separator: " ")) ran longer than \(seconds) s:\n\(text)")
        }
        return (process.terminationStatus, text)
    }

    /// Kills its process when it fires, unless it was disarmed first (the process ended). SIGKILL:
    /// a child started from a test's thread inherits that thread's blocked signals, SIGTERM
    /// among them, so `Process.terminate()` does not end it.
    private final class Watchdog: @unchecked Sendable {
        private let lock = NSLock()
        private let process: Process
        private var state: (armed: Bool, fired: Bool) = (true, false)

        init(_ process: Process) { self.process = process }

        func fire() {
            lock.withLock {
                guard state.armed, process.isRunning else { return }
                state.fired = true
                kill(process.processIdentifier, SIGKILL)
            }
        }

        /// Whether the process ended on its own (the watchdog had not fired).
        func disarm() -> Bool {
            lock.withLock {
                state.armed = false
                return !state.fired
            }
        }
    }
}

/// The repository root, found from this file's path (tests read Certificates/, docs/, Fuzz/).
public let repositoryRootURL: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Polls until `condition` holds or `seconds` pass; for tests that wait on real sockets.
public func eventually(seconds: Double = 10, _ condition: () -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// Runs blocking work (a child process, a semaphore) on a thread of its own. Tests share a
/// cooperative pool as wide as the machine has cores; blocking one of its threads there starves
/// every other test's tasks (a trust evaluator, a deadline) until the work ends.
public func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}
