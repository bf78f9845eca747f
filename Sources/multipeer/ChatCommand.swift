import ArgumentParser
import Foundation

struct ChatCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Chat and send files with nearby peers.",
        discussion: """
            Advertises and browses at once. Nearby peers are listed with a number; invite one \
            with /invite NUMBER. An invitation to you asks whether to accept; then both sides \
            see the other's certificate and a 6-digit pairing code, and accept only if the two \
            screens show the same code (a man in the middle cannot make them agree). Lines you \
            type go to every connected peer.

            Commands: /nearby, /invite NUMBER|NAME, /peers, /send PATH, /help, /quit (or Ctrl-C).
            """
    )

    @OptionGroup var peer: PeerOptions

    @Option(help: ArgumentHelp("Where received files are saved.", valueName: "directory"))
    var dir: String = "."

    func run() async throws {
        let console = Console()
        do {
            let chat = try ChatSession(options: peer, files: try ReceivedFiles(path: dir), console: console)
            try await chat.run()
        } catch {
            console.say("multipeer: \(error.message)")
            throw error.exitCode
        }
    }
}
