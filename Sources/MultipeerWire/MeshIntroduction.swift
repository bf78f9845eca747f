import NIOCore

/// MESH_INTRODUCTION (docs/PROTOCOL.md §6.4.5): other members and where they listen.
public struct MeshIntroduction: Hashable, Sendable {
    public struct Entry: Hashable, Sendable {
        public let peerID: WirePeerID
        /// Where the member listens; port 0 (`WireEndpoint.notListening`) when it accepts no
        /// connections and so dials the members it is introduced to.
        public let endpoint: WireEndpoint

        public init(peerID: WirePeerID, endpoint: WireEndpoint) {
            self.peerID = peerID
            self.endpoint = endpoint
        }
    }

    public static let entryCounts = 1...WireLimits.maxMeshIntroductionEntries
    public static let minEncodedLength = 1 + 19 + 7
    public static let maxEncodedLength =
        1 + WireLimits.maxMeshIntroductionEntries * (WirePeerID.maxEncodedLength + WireEndpoint.maxEncodedLength)

    public let entries: [Entry]

    public init(entries: [Entry]) throws(WireError) {
        try Self.checkCount(entries.count)
        self.entries = entries
    }

    private static func checkCount(_ count: Int) throws(WireError) {
        guard count >= entryCounts.lowerBound else { throw WireError(.invalidValue, "MESH_INTRODUCTION with no entries") }
        guard count <= entryCounts.upperBound else {
            throw WireError(.limitExceeded, "MESH_INTRODUCTION with \(count) entries, at most \(entryCounts.upperBound)")
        }
    }

    var encodedLength: Int {
        entries.reduce(1) { $0 + $1.peerID.encodedLength + $1.endpoint.encodedLength }
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(entries.count))
        for entry in entries {
            entry.peerID.encode(into: &buffer)
            entry.endpoint.encode(into: &buffer)
        }
    }

    static func decode(from buffer: inout ByteBuffer) throws(WireError) -> MeshIntroduction {
        let count = Int(try buffer.readWireInteger(as: UInt8.self, "MESH_INTRODUCTION count"))
        try checkCount(count)
        var entries: [Entry] = []
        entries.reserveCapacity(count)
        for _ in 0..<count {
            let peerID = try WirePeerID.decode(from: &buffer)
            entries.append(Entry(peerID: peerID, endpoint: try WireEndpoint.decode(from: &buffer, allowingNotListening: true)))
        }
        return try MeshIntroduction(entries: entries)
    }
}
