/// Runs `body` for at most `seconds`; nil when the time ran out first (the body is cancelled).
enum Deadline {
    static func run<T: Sendable>(seconds: Double, _ body: @escaping @Sendable () async -> T?) async -> T? {
        await withTaskGroup(of: T?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }
}
