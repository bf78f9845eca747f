import Foundation
import MultipeerTestSupport

/// A tmux server of the test's own (its own socket), whose panes run programs on a terminal that
/// the test drives as a person would: keys in with send-keys, the screen out with capture-pane.
/// Each pane's command is followed by `[exited STATUS]` so the test sees how it ended.
final class Tmux {
    struct ScreenWaitFailed: Error, CustomStringConvertible {
        let description: String
    }

    private let socket = "mpt\(getpid())x\(UInt32.random(in: 0 ... .max))"
    private var started = false
    private let tmux = URL(fileURLWithPath: "/usr/bin/tmux")

    static var available: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux") }

    /// Starts `command` in a new pane and returns the pane's identifier.
    func start(_ command: [String]) throws -> String {
        let shell = command.map(Self.quoted).joined(separator: " ") + "; echo \"[exited $?]\"; sleep 600"
        let arguments = started
            ? ["split-window", "-t", "main", "-P", "-F", "#{pane_id}", shell]
            : ["new-session", "-d", "-s", "main", "-x", "220", "-y", "60", "-P", "-F", "#{pane_id}", shell]
        let pane = try run(arguments).trimmingCharacters(in: .whitespacesAndNewlines)
        started = true
        try run(["select-layout", "-t", "main", "even-vertical"])
        return pane
    }

    /// Types a line and presses Enter.
    func type(_ pane: String, _ line: String) throws {
        try run(["send-keys", "-t", pane, "-l", line])
        try run(["send-keys", "-t", pane, "Enter"])
    }

    /// Presses a key by tmux's name for it (`C-c`).
    func press(_ pane: String, _ key: String) throws {
        try run(["send-keys", "-t", pane, key])
    }

    /// Everything the pane has shown (its history included), wrapped lines joined.
    func screen(_ pane: String) throws -> String {
        try run(["capture-pane", "-p", "-J", "-S", "-2000", "-t", pane])
    }

    /// Looks at the pane every 50 ms until `predicate` holds; throws with the screen after `seconds`.
    @discardableResult
    func waitFor(_ pane: String, within seconds: Double, _ what: String, _ predicate: (String) -> Bool) throws -> String {
        let deadline = Date().addingTimeInterval(seconds)
        var screen = ""
        while Date() < deadline {
            screen = try self.screen(pane)
            if predicate(screen) { return screen }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw ScreenWaitFailed(description: "no \(what) within \(seconds) s; the screen:\n\(screen)")
    }

    @discardableResult
    func waitFor(_ pane: String, within seconds: Double = 20, showing text: String) throws -> String {
        try waitFor(pane, within: seconds, "\"\(text)\"") { $0.contains(text) }
    }

    /// Runs a tmux command. Its output goes to a file, not a pipe: the server that the first
    /// command forks would hold a pipe open for as long as it runs. Spawned and waited for
    /// directly: Foundation's Process left the client, which exits within milliseconds, a zombie
    /// it never noticed.
    @discardableResult
    private func run(_ arguments: [String]) throws -> String {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("\(socket)-\(UInt32.random(in: 0 ... .max)).out").path
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let argv = [tmux.path, "-L", socket, "-f", "/dev/null"] + arguments
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Tests run on threads that block signals; the server forked from this client must not inherit that.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        let spawned = posix_spawn(&pid, tmux.path, &actions, &attributes, cArguments, environ)
        guard spawned == 0 else { throw CommandFailed(description: "cannot start tmux: \(String(cString: strerror(spawned)))") }
        let status = Self.waitForExit(pid, seconds: 20)
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard let status else { throw CommandFailed(description: "tmux \(arguments.joined(separator: " ")) did not finish within 20 s") }
        guard status == 0 else { throw CommandFailed(description: "tmux \(arguments.joined(separator: " ")) exited with \(status): \(text)") }
        return text
    }

    /// The exit status of `pid`, or nil (and the process killed) after `seconds`.
    private static func waitForExit(_ pid: pid_t, seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        var status: Int32 = 0
        while true {
            let waited = waitpid(pid, &status, WNOHANG)
            if waited == pid { return (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F) }
            if waited < 0 || Date() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                return nil
            }
            Thread.sleep(forTimeInterval: 0.002)
        }
    }

    private static func quoted(_ argument: String) -> String {
        "'" + argument.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    deinit {
        if started { _ = try? run(["kill-server"]) }
    }
}
