import MultipeerWire

/// A session holds at most `WireLimits.maxSessionMembers` peers, itself included
/// (docs/PROTOCOL.md §7.4): the one rule the session core and an advertiser's answer both apply.
package enum MemberLimit {
    /// Whether one more peer fits beside `others` peers the session already holds.
    package static func hasRoom(besides others: Int) -> Bool {
        others < WireLimits.maxSessionMembers - 1
    }
}
