import Foundation

/// Apple's classes have one designated initializer. An app's subclass that overrides it inherits
/// the other initializers only if it is the only one visible (Swift lets a subclass inherit
/// convenience initializers once it overrides every designated one, and none may be hidden).
/// So the library's initializers that take settings Apple's lacks (a configuration, a listen
/// address) are convenience ones: they leave the settings here, on the calling thread, and the
/// designated initializer they call (the subclass's override first, then ours) takes them.
enum InitializerSettings {
    /// What one convenience initializer left, for the object made with `owner` (the peer ID or
    /// browser it was given).
    private final class Entry {
        let serial: Int
        let owner: ObjectIdentifier
        let value: Any

        init(serial: Int, owner: ObjectIdentifier, value: Any) {
            self.serial = serial
            self.owner = owner
            self.value = value
        }
    }

    /// Entries of the calling thread, newest last (initializers nest).
    private final class Stack {
        var entries: [Entry] = []
        var nextSerial = 0
    }

    /// What `leave` hands back, for `discard`.
    struct Ticket {
        fileprivate let serial: Int
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
    /// convenience initializer calls `discard` with the ticket once that returned.
    static func leave<Value>(_ value: Value, for owner: AnyObject) -> Ticket {
        let stack = stack
        stack.nextSerial += 1
        stack.entries.append(Entry(serial: stack.nextSerial, owner: ObjectIdentifier(owner), value: value))
        return Ticket(serial: stack.nextSerial)
    }

    /// The newest value of type `Value` left for `owner`, removed. When none was left for
    /// `owner` but one of that type was (a subclass's override passed another, equal object to
    /// `super.init`), that one: its settings must not fall back to the defaults unnoticed.
    static func take<Value>(_ type: Value.Type, for owner: AnyObject) -> Value? {
        let stack = stack
        let id = ObjectIdentifier(owner)
        guard let index = stack.entries.lastIndex(where: { $0.owner == id && $0.value is Value })
            ?? stack.entries.lastIndex(where: { $0.value is Value })
        else { return nil }
        return stack.entries.remove(at: index).value as? Value
    }

    /// Removes what `leave` left, had no initializer taken it; nothing else.
    static func discard(_ ticket: Ticket) {
        stack.entries.removeAll { $0.serial == ticket.serial }
    }
}
