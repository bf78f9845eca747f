// swift-tools-version: 6.2
import PackageDescription

// The baseline a Swift user would pick instead of swift-multipeer: TLS 1.3 over SwiftNIO with
// swift-nio-ssl. A package of its own so that swift-nio-ssl (and its vendored BoringSSL) never
// enters the library's dependency graph. Run next to multipeer-bench with scripts/bench-compare.
let package = Package(
    name: "multipeer-benchmarks",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "nio-ssl-bench", targets: ["nio-ssl-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    ],
    targets: [
        .executableTarget(
            name: "nio-ssl-bench",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
            ],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
    ],
    swiftLanguageModes: [.v6]
)
