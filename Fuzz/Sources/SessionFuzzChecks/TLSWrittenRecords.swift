import MultipeerCrypto

/// One side's writes, opened as the honest peer would.
struct TLSWrittenRecords {
    let opener: TLSRecordProtection
    let isLibrary: Bool
    /// Application data the side took, in order.
    var accepted: [UInt8] = []
    var opened = 0
    /// KeyUpdate requests it had read when last told, and whether it owes an answer.
    var requestsRead = 0
    var owesAnswer = false
    var keyUpdatesRequested = 0
    var closeNotify = false
    var fatalAlert = false

    init(opener: TLSRecordProtection, isLibrary: Bool) {
        self.opener = opener
        self.isLibrary = isLibrary
    }

    mutating func noteRequestsRead(_ count: Int) {
        precondition(count >= requestsRead, "KeyUpdate requests read went backwards")
        if count > requestsRead { owesAnswer = true }
        requestsRead = count
    }

    /// Opens `bytes` (whole records) and checks each against the rules both sides keep.
    mutating func open(_ bytes: [UInt8]) {
        let side = isLibrary ? "the library" : "OpenSSL"
        var offset = 0
        while offset < bytes.count {
            precondition(bytes.count - offset >= 5, "\(side) wrote part of a record header")
            let length = Int(bytes[offset + 3]) << 8 | Int(bytes[offset + 4])
            precondition(bytes.count - offset >= 5 + length && length > TLSRecordProtection.tagLength, "\(side) wrote part of a record")
            var plaintext = [UInt8](repeating: 0, count: length)
            let inner = bytes[offset..<(offset + 5 + length)].withUnsafeBytes { record in
                plaintext.withUnsafeMutableBytes { opener.open(record, into: $0.baseAddress!) }
            }
            offset += 5 + length
            guard let inner else { preconditionFailure("the peer could not open a record \(side) wrote") }
            precondition(plaintext[inner - 1] != 0, "\(side) padded a record")
            precondition(!fatalAlert, "\(side) wrote after a fatal alert")
            let content = Array(plaintext[..<(inner - 1)])
            switch plaintext[inner - 1] {
            case 23:
                precondition(!closeNotify, "\(side) wrote data after close_notify")
                precondition(!owesAnswer, "\(side) wrote data before answering a KeyUpdate request")
                precondition(
                    opened + content.count <= accepted.count && accepted[opened..<(opened + content.count)].elementsEqual(content),
                    "\(side) wrote data it was not given")
                opened += content.count
            case 22:
                precondition(content.count == 5 && content[..<4] == [24, 0, 0, 1] && content[4] <= 1, "\(side) wrote a handshake message other than KeyUpdate")
                // Policy: the library writes nothing after close_notify; OpenSSL still answers.
                precondition(!(closeNotify && isLibrary), "the library wrote a KeyUpdate after close_notify")
                if content[4] == 1 {
                    keyUpdatesRequested += 1
                } else {
                    // Policy: the library answers only what was asked, once for any number of requests.
                    precondition(!isLibrary || owesAnswer, "the library sent a KeyUpdate nobody asked for")
                }
                owesAnswer = false
                do { try opener.update() } catch { preconditionFailure("KeyUpdate: \(error)") }
            case 21:
                precondition(content.count == 2, "\(side) wrote an alert of \(content.count) bytes")
                precondition(!(closeNotify && isLibrary), "the library wrote an alert after close_notify")
                if content[1] == 0 {
                    precondition(content[0] == 1 && !closeNotify, "\(side) wrote close_notify twice or as fatal")
                    closeNotify = true
                } else {
                    precondition(content[0] == 2, "\(side) wrote alert \(content[1]) as a warning")
                    fatalAlert = true
                }
            default:
                preconditionFailure("\(side) wrote content type \(plaintext[inner - 1])")
            }
        }
        precondition(opened == accepted.count, "\(side) held back data it took")
    }
}
