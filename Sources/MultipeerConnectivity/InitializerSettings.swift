import Foundation

/// Apple's classes have one designated initializer. An app's subclass that overrides it inherits
/// the other initializers only if it is the only one visible (Swift lets a subclass inherit
/// convenience initializers once it overrides every designated one, and none may be hidden).
/// So the library's initializers that take settings Apple's lacks (a configuration, a listen
/// address) are convenience ones: they leave the settings here, on the calling thread, and the
/// designated initializer they call (the subclass's override first, then ours) takes them.
enum InitializerSettings {
    /// What one convenience initializer left, for the object made with `owner` (the peer ID or
    /// browser it was given), so that an object of another kind made meanwhile cannot take it.
    private final class Entry {
        let owner: ObjectIdentifier
        let value: Any

        init(owner: ObjectIdentifier, value: Any) {
            self.owner = owner
            self.value = value
        }
    }

    /// Entries of the calling thread, newest last (initializers nest).
    private final class Stack {
        var entries: [Entry] = []
    }

    private static let key = "swift-multipeer.InitializerSettings"

    private static var stack: Stack {
        let dictionary = Thread.current.threadDictionary
        if let stack = dictionary[key] as? Stack { return stack }
        let stack = Stack()
        dictionary[key] = stack
        return stack
    }

    /// Leaves `value` for the designated initializer about to be called for `owner`; the
    /// convenience initializer calls `discard` once that returned.
    static func leave<Value>(_ value: Value, for owner: AnyObject) {
        stack.entries.append(Entry(owner: ObjectIdentifier(owner), value: value))
    }

    /// The newest value of type `Value` left for `owner`, removed; nil when none was.
    static func take<Value>(_ type: Value.Type, for owner: AnyObject) -> Value? {
        let stack = stack
        let id = ObjectIdentifier(owner)
        guard let index = stack.entries.lastIndex(where: { $0.owner == id && $0.value is Value }) else { return nil }
        return stack.entries.remove(at: index).value as? Value
    }

    /// Removes what is left for `owner` of type `Value`, had no initializer taken it.
    static func discard<Value>(_ type: Value.Type, for owner: AnyObject) {
        let id = ObjectIdentifier(owner)
        stack.entries.removeAll { $0.owner == id && $0.value is Value }
    }
}
