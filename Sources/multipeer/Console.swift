import Foundation
import Synchronization

/// The terminal: lines printed whole and in order (control and format characters made
/// visible, whatever their source), a status line of progress bars kept at the bottom (on a
/// terminal only), and yes/no questions answered by input lines.
final class Console: Sendable {
    /// Standard output is a terminal: progress is drawn as bars, redrawn in place.
    let drawsBars: Bool
    /// Standard input is a terminal: there is a person to ask.
    let canAsk: Bool

    private struct Question {
        let id: Int
        let text: String
        let answer: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var status: [(key: String, text: String)] = []
        var statusShown = false
        var questions: [Question] = []
        var nextQuestion = 0
        var inputEnded = false
    }

    private let state = Mutex(State())

    init(drawsBars: Bool = isatty(STDOUT_FILENO) == 1, canAsk: Bool = isatty(STDIN_FILENO) == 1) {
        self.drawsBars = drawsBars
        self.canAsk = canAsk
    }

    /// Prints one line (above the status line, which is redrawn after it).
    func say(_ text: String) {
        let line = Terminal.safe(text, limit: 16_384)
        state.withLock { state in
            var output = state.statusShown ? "\r\u{1B}[K" : ""
            output += line + "\n"
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

    /// One row, cut to the terminal's width: a wrapped status line could not be redrawn in place.
    private func drawnStatus(_ state: State) -> String {
        guard drawsBars, !state.status.isEmpty else { return "" }
        let line = Terminal.safe(state.status.map(\.text).joined(separator: " | "))
        let width = max(Self.terminalWidth() - 1, 20)
        return line.count > width ? String(line.prefix(width - 1)) + "…" : line
    }

    private static func terminalWidth() -> Int {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    private func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    /// Asks a yes/no question, answered by an input line of y, yes, n or no (any case). Questions
    /// wait their turn. No answer within `seconds` (shorter than the library's own deadline for
    /// what is asked), ended input, or no terminal to ask at: no.
    func ask(_ text: String, within seconds: Double = 25) async -> Bool {
        guard canAsk else {
            say("\(text) [y/n] no (no terminal to ask)")
            return false
        }
        let id = state.withLock { state in
            defer { state.nextQuestion += 1 }
            return state.nextQuestion
        }
        let expiry = Task { [weak self] in
            try await Task.sleep(for: .seconds(seconds))
            self?.expire(id)
        }
        defer { expiry.cancel() }
        return await withCheckedContinuation { continuation in
            let showNow = state.withLock { state -> Bool? in
                if state.inputEnded { return nil }
                state.questions.append(Question(id: id, text: text, answer: continuation))
                return state.questions.count == 1
            }
            switch showNow {
            case nil: continuation.resume(returning: false)
            case true?: say("\(text) [y/n]")
            case false?: break
            }
        }
    }

    /// Takes an input line as the answer to the question shown, if it is one; false when no
    /// question waits or the line is not y/yes/n/no (the caller handles it as any other line).
    func answer(with line: String) -> Bool {
        let word = line.trimmingCharacters(in: .whitespaces).lowercased()
        guard ["y", "yes", "n", "no"].contains(word) else { return false }
        let (question, next) = state.withLock { state -> (Question?, Question?) in
            guard !state.questions.isEmpty else { return (nil, nil) }
            let first = state.questions.removeFirst()
            return (first, state.questions.first)
        }
        guard let question else { return false }
        question.answer.resume(returning: word.hasPrefix("y"))
        if let next { say("\(next.text) [y/n]") }
        return true
    }

    /// The question `id`, unanswered in time, is withdrawn and answered no.
    private func expire(_ id: Int) {
        let (question, wasShown, next) = state.withLock { state -> (Question?, Bool, Question?) in
            guard let index = state.questions.firstIndex(where: { $0.id == id }) else { return (nil, false, nil) }
            let question = state.questions.remove(at: index)
            return (question, index == 0, index == 0 ? state.questions.first : nil)
        }
        guard let question else { return }
        say("(no answer in time: no)")
        question.answer.resume(returning: false)
        if wasShown, let next { say("\(next.text) [y/n]") }
    }

    /// A question is waiting for its answer.
    var isAsking: Bool { state.withLock { !$0.questions.isEmpty } }

    /// Shows the waiting question again (after a line that was not an answer).
    func repeatQuestion() {
        if let text = state.withLock({ $0.questions.first?.text }) { say("\(text) [y/n]") }
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
}

extension Console {
    /// For commands without a chat: input lines only answer questions. Nil off a terminal.
    func answerFromInput() -> Task<Void, Never>? {
        guard canAsk else { return nil }
        let lines = InputLines.start()
        return Task { [self] in
            for await line in lines where !answer(with: line) && isAsking {
                repeatQuestion()
            }
            endInput()
        }
    }
}
