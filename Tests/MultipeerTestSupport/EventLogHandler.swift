import Logging

/// A log handler that hands every event to a closure: for tests and probes that read what a
/// session logged.
public struct EventLogHandler: LogHandler {
    private let onEvent: @Sendable (LogEvent) -> Void
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace

    public init(_ onEvent: @escaping @Sendable (LogEvent) -> Void) {
        self.onEvent = onEvent
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) { onEvent(event) }

    /// The event's metadata as `key=value` fields in key order, space-separated.
    public static func fields(of event: LogEvent) -> String {
        (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }
}
