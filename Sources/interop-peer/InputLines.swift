import Foundation

/// Standard input as lines, read on a thread of its own (a blocking read must not hold a task's
/// thread). Unbounded: a dropped command would be a wrong answer, and the tester paces itself.
enum InputLines {
    static func start() -> AsyncStream<String> {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .unbounded)
        let reader = Thread {
            while let line = readLine(strippingNewline: true) { continuation.yield(line) }
            continuation.finish()
        }
        reader.name = "interop-peer input"
        reader.start()
        return lines
    }
}
