import Foundation
import MultipeerTestSupport
import Testing

/// The protocol core decides and the shells act: the core may not reach a socket, a file, a
/// thread, a lock or the wall clock, so every decision it makes can be replayed on a virtual
/// clock. Checked on its sources and its target's declared dependencies.
@Suite("Protocol core purity (docs/ARCHITECTURE.md)")
struct ProtocolPurityTests {
    static let sources = repositoryRootURL.appendingPathComponent("Sources/MultipeerProtocol")
    /// NIOCore for ByteBuffer, TimeAmount and NIODeadline (never read: time comes in as values),
    /// Logging for diagnostics that never change an outcome.
    static let allowedImports: Set = ["MultipeerWire", "MultipeerDNS", "MultipeerCrypto", "NIOCore", "Logging"]
    /// Names that would let the core do I/O, block, or read the clock itself.
    static let forbidden = [
        "Mutex", "Atomic", "NIOLock", "NIOLockedValueBox", "DispatchQueue", "Thread", "FileManager", "FileHandle",
        "NIOThreadPool", "EventLoop", "Bootstrap", "NIODeadline.now", "DispatchTime", "Date()", "ContinuousClock",
        "fopen", "Task {", "Task.sleep",
    ]

    static func swiftFiles() throws -> [URL] {
        let enumerator = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        return enumerator.compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
    }

    @Test func theCoreImportsOnlyPureModules() throws {
        let files = try Self.swiftFiles()
        #expect(files.count > 20, "the protocol core's sources were not found at \(Self.sources.path)")
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for line in text.split(separator: "\n") {
                let words = line.split(separator: " ").map(String.init)
                guard let index = words.firstIndex(of: "import"), words[..<index].allSatisfy({ $0.hasPrefix("@") }),
                    index + 1 < words.count
                else { continue }
                #expect(Self.allowedImports.contains(words[index + 1]), "\(file.lastPathComponent) imports \(words[index + 1])")
            }
        }
    }

    @Test func theCoreNamesNothingThatDoesIOOrBlocks() throws {
        for file in try Self.swiftFiles() {
            let code = try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
                .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
                .joined(separator: "\n")
            for name in Self.forbidden {
                #expect(!code.contains(name), "\(file.lastPathComponent) uses \(name)")
            }
        }
    }

    /// SwiftPM lets a target import any module built before it, so the declared dependencies are
    /// checked too: a new dependency on NIOPosix or Foundation must fail here.
    @Test func theCoreTargetDependsOnlyOnPureModules() throws {
        let manifest = try String(contentsOf: repositoryRootURL.appendingPathComponent("Package.swift"), encoding: .utf8)
        let start = try #require(manifest.range(of: "name: \"MultipeerProtocol\","))
        let rest = manifest[start.upperBound...]
        let end = try #require(rest.range(of: "\n        ),"))
        let declared = rest[..<end.lowerBound]
        let names = declared.matches(of: /"([A-Za-z]+)"/).map { String($0.output.1) }
            .filter { $0 != "swift-nio" && $0 != "swift-log" }
        #expect(!names.isEmpty)
        #expect(Set(names).isSubset(of: Self.allowedImports), "declared: \(names)")
    }
}
