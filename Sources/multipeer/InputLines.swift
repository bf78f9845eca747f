import Foundation

/// Standard input as lines, read on a thread of its own (a blocking read must not hold a
/// task's thread). The sequence ends at end of input.
enum InputLines {
    static func start() -> AsyncStream<String> {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(256))
        let reader = Thread {
            while let line = readLine(strippingNewline: true) {
                continuation.yield(line)
            }
            continuation.finish()
        }
        reader.name = "multipeer input"
        reader.start()
        return lines
    }
}
