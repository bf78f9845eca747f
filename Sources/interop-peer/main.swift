import Foundation

// interop-peer: one MCSession behind a line protocol on standard input and output
// (Interop/HARNESS.md), for peers written in other languages.

// A reader that closes its end must not kill us mid-line; writes then just fail.
signal(SIGPIPE, SIG_IGN)

let driver: Driver
do {
    driver = try Driver(try Options.parse(Array(CommandLine.arguments.dropFirst())))
} catch {
    FileHandle.standardError.write(Data("interop-peer: \(error)\n\(Options.usage)\n".utf8))
    exit(2)
}
await driver.run(InputLines.start())
