import Foundation
import Synchronization

/// The terminal: lines printed whole and in order, a status line of progress bars kept at the
/// bottom (on a terminal only), and yes/no questions answered by the next input line.
final class Console: Sendable {
    /// Standard output is a terminal: progress is drawn as bars, redrawn in place.
    let drawsBars: Bool
    /// Standard input is a terminal: there is a person to ask.
    let canAsk: Bool

    private struct Question {
        let text: String
        let answer: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var status: [(key: String, text: String)] = []
        var statusShown = false
        var questions: [Question] = []
        var inputEnded = false
    }

    private let state = Mutex(State())

    init(drawsBars: Bool = isatty(STDOUT_FILENO) == 1, canAsk: Bool = isatty(STDIN_FILENO) == 1) {
        self.drawsBars = drawsBars
        self.canAsk = canAsk
    }

    /// Prints one line (above the status line, which is redrawn after it).
    func say(_ text: String) {
        state.withLock { state in
            var output = state.statusShown ? "\r\u{1B}[K" : ""
            output += text + "\n"
            output += drawnStatus(state)
            state.statusShown = !state.status.isEmpty && drawsBars
            write(output)
        }
    }

    /// Sets (or with nil removes) one entry of the status line.
    func setStatus(_ key: String, _ text: String?) {
        guard drawsBars else { return }
        state.withLock { state in
            if let index = state.status.firstIndex(where: { $0.key == key }) {
                if let text { state.status[index].text = text } else { state.status.remove(at: index) }
            } else if let text {
                state.status.append((key, text))
            }
            write("\r\u{1B}[K" + drawnStatus(state))
            state.statusShown = !state.status.isEmpty
        }
    }

    private func drawnStatus(_ state: State) -> String {
        guard drawsBars, !state.status.isEmpty else { return "" }
        return state.status.map(\.text).joined(separator: "  |  ")
    }

    private func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    /// Asks a yes/no question; the next input line answers it ("y" or "yes", any case, is yes).
    /// Questions wait their turn; without input (ended, or not a terminal) the answer is no.
    func ask(_ text: String) async -> Bool {
        guard canAsk else {
            say("\(text) [y/n] no (no terminal to ask)")
            return false
        }
        return await withCheckedContinuation { continuation in
            let showNow = state.withLock { state -> Bool? in
                if state.inputEnded { return nil }
                state.questions.append(Question(text: text, answer: continuation))
                return state.questions.count == 1
            }
            switch showNow {
            case nil:
                continuation.resume(returning: false)
            case true?:
                say("\(text) [y/n]")
            case false?:
                break
            }
        }
    }

    /// Gives an input line to the question waiting, if any; false when none was waiting.
    func answer(with line: String) -> Bool {
        let (question, next) = state.withLock { state -> (Question?, Question?) in
            guard !state.questions.isEmpty else { return (nil, nil) }
            let first = state.questions.removeFirst()
            return (first, state.questions.first)
        }
        guard let question else { return false }
        let word = line.trimmingCharacters(in: .whitespaces).lowercased()
        question.answer.resume(returning: word == "y" || word == "yes")
        if let next { say("\(next.text) [y/n]") }
        return true
    }

    /// Input ended: every question waiting is answered no, and later ones at once.
    func endInput() {
        let waiting = state.withLock { state in
            state.inputEnded = true
            defer { state.questions.removeAll() }
            return state.questions
        }
        for question in waiting { question.answer.resume(returning: false) }
    }

    var hasQuestionWaiting: Bool { state.withLock { !$0.questions.isEmpty } }
}
