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

    /// Runs a program to completion; returns its exit status and everything it printed.
    public static func run(_ executable: URL, _ arguments: [String], in directory: URL? = nil) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = directory }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
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
