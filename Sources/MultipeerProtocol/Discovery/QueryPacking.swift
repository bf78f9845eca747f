import MultipeerDNS

/// Splits a query into packets within a byte budget (RFC 6762 §7.2): questions first, as many
/// to a packet as fit; known answers then fill the last question packet and as many packets
/// without questions as they need, each with TC set but the last. Sizes are measured with the
/// real encoder, name compression included.
package enum QueryPacking {
    static func packets(questions: [DNSQuestion], knownAnswers: [DNSResourceRecord], budget: Int) -> [DNSMessage] {
        var messages: [DNSMessage] = []
        var current = DNSMessage(isResponse: false)
        var pendingQuestions = questions[...]
        // Each pass takes at least one question.
        while !pendingQuestions.isEmpty {
            if !current.questions.isEmpty {
                messages.append(current)
                current = DNSMessage(isResponse: false)
            }
            let count = max(1, fitting(pendingQuestions, budget: budget) { $0.questions = Array($1) })
            current.questions = Array(pendingQuestions.prefix(count))
            pendingQuestions = pendingQuestions.dropFirst(count)
        }
        var pendingAnswers = knownAnswers[...]
        // Each pass takes at least one record, or closes a packet full of questions (once).
        while !pendingAnswers.isEmpty {
            let count = fitting(pendingAnswers, budget: budget) { $0.questions = current.questions; $0.answers = Array($1) }
            if count == 0 {
                if current.questions.isEmpty {
                    // Too large for any packet alone: left out, which costs at most an extra answer.
                    pendingAnswers = pendingAnswers.dropFirst()
                } else {
                    current.isTruncated = true
                    messages.append(current)
                    current = DNSMessage(isResponse: false)
                }
                continue
            }
            current.answers = Array(pendingAnswers.prefix(count))
            pendingAnswers = pendingAnswers.dropFirst(count)
            if !pendingAnswers.isEmpty {
                current.isTruncated = true
                messages.append(current)
                current = DNSMessage(isResponse: false)
            }
        }
        if !current.questions.isEmpty || !current.answers.isEmpty { messages.append(current) }
        return messages
    }

    /// The encoded size, or nil when the message cannot be encoded (over a codec limit).
    static func size(_ message: DNSMessage) -> Int? {
        try? message.encoded().readableBytes
    }

    /// The longest prefix of `items` that `fill` can put in a message within `budget` bytes.
    /// Binary search: a longer prefix never encodes shorter.
    private static func fitting<Item>(
        _ items: ArraySlice<Item>, budget: Int, fill: (inout DNSMessage, ArraySlice<Item>) -> Void
    ) -> Int {
        var low = 0
        var high = min(items.count, DNSLimits.maxRecordsPerSection)
        while low < high {
            let middle = (low + high + 1) / 2
            var message = DNSMessage(isResponse: false)
            fill(&message, items.prefix(middle))
            if let size = size(message), size <= budget { low = middle } else { high = middle - 1 }
        }
        return low
    }
}
