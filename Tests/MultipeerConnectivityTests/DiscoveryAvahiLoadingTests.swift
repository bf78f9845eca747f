import Foundation
import MultipeerTestSupport
import Testing

/// Avahi's client library is loaded when the system engine is asked for, never linked: programs
/// start where it is missing, `automatic` then runs the embedded engine, and `system` says why
/// it cannot run (docs/PROTOCOL.md §12.4).
@Suite("Discovery without Avahi's client library", .serialized)
struct DiscoveryAvahiLoadingTests {
    static let service = DiscoveryNamespaceTests.service
    static let soname = "libavahi-client.so.3"

    /// The shared libraries `ldd` lists for a program, by soname; fails when ldd fails.
    static func neededLibraries(_ path: String) throws -> [String] {
        let result = try BuiltProducts.runBlocking(URL(fileURLWithPath: "/usr/bin/ldd"), [path], seconds: 30)
        guard result.status == 0 else { throw CommandFailed(description: "ldd \(path): \(result.output)") }
        return result.output.split(separator: "\n").compactMap { $0.split(whereSeparator: \.isWhitespace).first.map(String.init) }
    }

    /// Neither the demo nor this test program (which holds all of the library's code) needs Avahi to start.
    @Test func noProgramLinksAvahi() throws {
        let testProgram = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        for program in [try BuiltProducts.executable("multipeer-demo").path, testProgram] {
            let libraries = try Self.neededLibraries(program)
            // Read for real: the C library is there, Avahi's are not.
            #expect(libraries.contains("libc.so.6"), "\(program): \(libraries)")
            #expect(!libraries.contains { $0.hasPrefix("libavahi") }, "\(program): \(libraries)")
        }
    }

    /// Where the dynamic loader finds Avahi's client library, symlinks resolved.
    static func installedLibrary() throws -> String {
        let result = try BuiltProducts.runBlocking(URL(fileURLWithPath: "/sbin/ldconfig"), ["-p"], seconds: 30)
        let line = try #require(result.output.split(separator: "\n").first { $0.contains("\(soname) (") })
        let path = try #require(line.components(separatedBy: " => ").last)
        return URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    }

    /// With avahi-daemon answering on the bus in every run, only the library differs: present,
    /// `automatic` takes the system engine; unloadable (the real file made empty in a mount
    /// namespace of the program's own, so dlopen fails as it does where the package is missing),
    /// `automatic` takes the embedded engine, which works, and `system` fails saying what is missing.
    @Test(.enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
    func automaticFallsBackAndSystemNamesTheMissingLibrary() async throws {
        let library = try Self.installedLibrary()
        let namespaces = try NetworkNamespaces(count: 1)
        defer { namespaces.remove() }
        let namespace = namespaces.names[0]
        let (daemon, bus) = try await DiscoverySystemEngineTests.daemon(in: namespace)
        let automatic = bus.merging(["MULTIPEER_DISCOVERY_ENGINE": "automatic"]) { $1 }

        let withLibrary = try NamespacedDemo(in: namespace, ["advertise", "Alice", Self.service, "mp0"], environment: automatic)
        #expect(await DiscoveryNamespaceTests.line(withLibrary, startingWith: "ENGINE", within: 10) == "ENGINE system")
        withLibrary.send("stop")
        _ = try #require(await DiscoveryNamespaceTests.line(withLibrary, startingWith: "STOPPED", within: 10))
        withLibrary.finish()

        let advertiser = try NamespacedDemo(in: namespace, ["advertise", "Bob", Self.service, "mp0"], environment: automatic, hiding: library)
        #expect(await DiscoveryNamespaceTests.line(advertiser, startingWith: "ENGINE", within: 10) == "ENGINE embedded")
        let identifier = try #require(await DiscoveryNamespaceTests.line(advertiser, startingWith: "ADVERTISING", within: 10)).split(separator: " ")[1]
        #expect(try DiscoverySystemEngineTests.demoHoldsPort5353(in: namespace))
        let browser = try NamespacedDemo(in: namespace, ["browse", Self.service, "mp0"], environment: automatic, hiding: library)
        #expect(await DiscoveryNamespaceTests.line(browser, startingWith: "ENGINE", within: 10) == "ENGINE embedded")
        #expect(await DiscoveryNamespaceTests.line(browser, startingWith: "FOUND", within: 10)?.hasPrefix("FOUND \(identifier) Bob") == true)

        let refused = try NamespacedDemo(
            in: namespace, ["advertise", "Carol", Self.service, "mp0"], environment: bus.merging(["MULTIPEER_DISCOVERY_ENGINE": "system"]) { $1 },
            hiding: library, standardErrorToo: true)
        var lines: [String] = []
        while lines.count < 20, let line = await refused.nextLine(within: 10) { lines.append(line) }
        refused.finish()
        #expect(refused.process.terminationStatus != 0)
        #expect(!lines.contains { $0.hasPrefix("ADVERTISING") }, "\(lines)")
        let failure = try #require(lines.first { $0.hasPrefix("multipeer-demo:") }, "\(lines)")
        #expect(failure.contains("systemUnavailable") && failure.contains("\(Self.soname) (Avahi's client library) cannot be loaded"), "\(failure)")
        withExtendedLifetime((daemon, advertiser, browser)) {}
    }
}
