// swift-tools-version: 6.2
import PackageDescription

// Layering (dependencies point one way, downwards):
//   MultipeerConnectivity (public Apple-shaped API)
//     -> MultipeerSession (SwiftNIO shells: sockets, files, timers; they decide nothing)
//       -> MultipeerProtocol (every protocol decision, sans-I/O: no sockets, files, threads or locks)
//         -> MultipeerCrypto (OpenSSL TLS, certificates, libsodium, key hygiene)
//           -> MultipeerWire  (pure sans-I/O codecs, no sockets)
//   C modules: CMultipeerOpenSSL / CMultipeerSodium (system libraries), CMultipeerShims (macro wrappers)
// Warnings fail the build of this package's own targets (not of its dependencies).
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

let package = Package(
    name: "swift-multipeer",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "MultipeerConnectivity", targets: ["MultipeerConnectivity"]),
        .library(name: "MultipeerWire", targets: ["MultipeerWire"]),
        .executable(name: "multipeer-demo", targets: ["multipeer-demo"]),
        .executable(name: "mpc-certgen", targets: ["mpc-certgen"]),
        .executable(name: "multipeer-bench", targets: ["multipeer-bench"]),
        .executable(name: "multipeer", targets: ["multipeer"]),
        .executable(name: "interop-peer", targets: ["interop-peer"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // `swift package generate-documentation` (scripts/docs); a plugin, not linked into anything.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CMultipeerOpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CMultipeerSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]
        ),
        // Avahi's client library for the system discovery engine, loaded with dlopen on first use
        // and never linked, so that programs start on machines without Avahi. Its headers
        // (Debian: libavahi-client-dev) are needed to build.
        .target(name: "CAvahiClient", linkerSettings: [.linkedLibrary("dl", .when(platforms: [.linux]))]),
        .target(
            name: "CMultipeerShims",
            dependencies: ["CMultipeerOpenSSL", "CMultipeerSodium"]
        ),
        .target(
            name: "MultipeerWire",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")]
        ),
        // mDNS / DNS-SD message codec (RFC 1035, 6762, 6763), pure and sans-I/O like MultipeerWire.
        .target(
            name: "MultipeerDNS",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")]
        ),
        .target(
            name: "MultipeerCrypto",
            dependencies: [
                "CMultipeerShims", "CMultipeerOpenSSL", "CMultipeerSodium", "MultipeerWire",
                .product(name: "NIOCore", package: "swift-nio"),
                // The record layer guard's verdict (TLSRecordLayerGuard).
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Imports are checked by ProtocolPurityTests: NIOCore for ByteBuffer and deadlines, never NIOPosix.
        .target(
            name: "MultipeerProtocol",
            dependencies: [
                "MultipeerWire",
                "MultipeerDNS",
                "MultipeerCrypto",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "MultipeerSession",
            dependencies: [
                "CMultipeerShims",
                "MultipeerProtocol",
                "MultipeerWire",
                "MultipeerCrypto",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "MultipeerDiscovery",
            dependencies: [
                "CAvahiClient",
                "MultipeerProtocol",
                "MultipeerDNS",
                "MultipeerWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "MultipeerConnectivity",
            dependencies: [
                "MultipeerDiscovery",
                "MultipeerSession",
                "MultipeerProtocol",
                "MultipeerWire",
                "MultipeerCrypto",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "multipeer-demo",
            dependencies: [
                "MultipeerConnectivity",
                "MultipeerDiscovery",
                "MultipeerWire",
                "MultipeerCrypto",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "mpc-certgen",
            dependencies: [
                "MultipeerCrypto",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "multipeer-bench",
            dependencies: [
                "MultipeerConnectivity", "MultipeerCrypto", "CMultipeerOpenSSL", "CMultipeerSodium", "CMultipeerShims",
                // The flood group's attackers and per-thread CPU times, shared with the tests.
                "MultipeerTestSupport", "MultipeerWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                // Reads the key exchange group from the sessions' log (GroupProbe).
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The terminal app: chat and file transfer between authenticated peers.
        .executableTarget(
            name: "multipeer",
            dependencies: [
                "MultipeerConnectivity",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // One session behind a line protocol (Interop/HARNESS.md), for peers written in other languages.
        .executableTarget(
            name: "interop-peer",
            dependencies: [
                "MultipeerConnectivity", "MultipeerCrypto", "MultipeerDiscovery", "MultipeerWire",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Examples/README.md: apps written as for Apple's platforms, each run end to end by ExampleAppsProcessTests.
        .executableTarget(name: "group-chat", dependencies: ["MultipeerConnectivity"], path: "Examples/GroupChat"),
        .executableTarget(name: "turn-game", dependencies: ["MultipeerConnectivity"], path: "Examples/TurnGame"),
        .executableTarget(name: "file-share", dependencies: ["MultipeerConnectivity"], path: "Examples/FileShare"),
        // libFuzzer targets (see Fuzz/README.md); a plain build links them as no-op executables.
        .target(
            name: "WireFuzzChecks",
            dependencies: ["MultipeerWire", .product(name: "NIOCore", package: "swift-nio")],
            path: "Fuzz/Sources/WireFuzzChecks"
        ),
        .executableTarget(name: "fuzz-frame-decoder", dependencies: ["WireFuzzChecks"], path: "Fuzz/Sources/fuzz-frame-decoder"),
        .executableTarget(name: "fuzz-peer-id", dependencies: ["WireFuzzChecks"], path: "Fuzz/Sources/fuzz-peer-id"),
        .executableTarget(
            name: "fuzz-connection-data", dependencies: ["WireFuzzChecks"], path: "Fuzz/Sources/fuzz-connection-data"),
        .target(
            name: "SessionFuzzChecks",
            dependencies: [
                "MultipeerSession", "MultipeerProtocol", "MultipeerWire", "MultipeerCrypto", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // OpenSSL's own record layer, which fuzz-tls-differential runs beside the library's.
                "CMultipeerOpenSSL", "CMultipeerShims",
            ],
            path: "Fuzz/Sources/SessionFuzzChecks"
        ),
        .executableTarget(name: "fuzz-datagram", dependencies: ["SessionFuzzChecks"], path: "Fuzz/Sources/fuzz-datagram"),
        .executableTarget(name: "fuzz-connection", dependencies: ["SessionFuzzChecks"], path: "Fuzz/Sources/fuzz-connection"),
        .executableTarget(
            name: "fuzz-channel-endpoints", dependencies: ["SessionFuzzChecks"], path: "Fuzz/Sources/fuzz-channel-endpoints"),
        .executableTarget(name: "fuzz-tls-records", dependencies: ["SessionFuzzChecks"], path: "Fuzz/Sources/fuzz-tls-records"),
        .executableTarget(
            name: "fuzz-tls-differential", dependencies: ["SessionFuzzChecks"], path: "Fuzz/Sources/fuzz-tls-differential"),
        .target(
            name: "DNSFuzzChecks",
            dependencies: ["MultipeerDNS", .product(name: "NIOCore", package: "swift-nio")],
            path: "Fuzz/Sources/DNSFuzzChecks"
        ),
        .executableTarget(name: "fuzz-dns-message", dependencies: ["DNSFuzzChecks"], path: "Fuzz/Sources/fuzz-dns-message"),
        .target(
            name: "MultipeerTestSupport",
            dependencies: [
                "MultipeerCrypto", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/MultipeerTestSupport"
        ),
        .testTarget(
            name: "MultipeerWireTests",
            dependencies: ["MultipeerWire", "WireFuzzChecks", "MultipeerTestSupport", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "MultipeerDiscoveryTests",
            dependencies: [
                "MultipeerDiscovery", "MultipeerProtocol", "MultipeerDNS", "MultipeerWire", "MultipeerTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "MultipeerDNSTests",
            dependencies: ["MultipeerDNS", "DNSFuzzChecks", "MultipeerTestSupport", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "MultipeerCryptoTests",
            dependencies: [
                "MultipeerCrypto", "CMultipeerShims", "CMultipeerOpenSSL", "MultipeerWire", "MultipeerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // What the protocol core's tests and the shell's tests share: machines wired back to back.
        .target(
            name: "ProtocolTestSupport",
            dependencies: [
                "MultipeerProtocol", "MultipeerWire", "MultipeerCrypto", "MultipeerTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/ProtocolTestSupport"
        ),
        // The protocol core's tests: no sockets, threads or files, on virtual clocks.
        .testTarget(
            name: "MultipeerProtocolTests",
            dependencies: [
                "MultipeerProtocol", "MultipeerWire", "MultipeerCrypto", "MultipeerTestSupport", "ProtocolTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "MultipeerSessionTests",
            dependencies: [
                "MultipeerSession", "MultipeerProtocol", "MultipeerWire", "MultipeerCrypto", "MultipeerTestSupport", "ProtocolTestSupport",
                "SessionFuzzChecks",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "MultipeerAppTests",
            dependencies: ["multipeer", "MultipeerConnectivity", "MultipeerCrypto", "MultipeerTestSupport"]
        ),
        .testTarget(
            name: "MultipeerConnectivityTests",
            dependencies: [
                "MultipeerConnectivity", "MultipeerSession", "MultipeerProtocol", "MultipeerWire", "MultipeerCrypto", "MultipeerTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // An HTTP server on loopback for resources fetched from http: URLs.
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && !target.name.hasPrefix("C") {
    target.swiftSettings = (target.swiftSettings ?? []) + strict
}
