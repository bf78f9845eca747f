import Foundation
import Testing

@testable import multipeer

/// What the terminal app does with names and text from peers: nothing a peer sends moves the
/// cursor, hides a character or chooses where a received file goes.
@Suite("multipeer: text and file names from peers")
struct UntrustedTextTests {
    @Test(arguments: [
        ("plain", "plain"),
        ("\u{1B}[2J\u{1B}[H", "\\u{1b}[2J\\u{1b}[H"),  // clear screen, cursor home
        ("bob\r\nalice: hi", "bob\\u{d}\\u{a}alice: hi"),  // a forged line
        ("ali\u{200B}ce", "ali\\u{200b}ce"),  // zero-width space
        ("\u{202E}evil", "\\u{202e}evil"),  // right-to-left override
        ("a\u{2028}b", "a\\u{2028}b"),  // line separator
        ("\u{85}", "\\u{85}"),  // C1 control
        ("é ü 日本", "é ü 日本"),
    ])
    func controlAndFormatCharactersAreShownNotObeyed(text: String, shown: String) {
        #expect(Terminal.safe(text) == shown)
    }

    @Test func longTextIsCut() {
        let shown = Terminal.safe(String(repeating: "a", count: 5_000), limit: 100)
        #expect(shown == String(repeating: "a", count: 100) + "…")
    }

    @Test(arguments: [
        ("photo.jpg", "photo.jpg"),
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("..\\..\\windows\\system.ini", "system.ini"),
        (".hidden", "hidden"),
        ("..", "received-file"),
        ("", "received-file"),
        ("dir/", "dir"),
        ("a\u{0}b\nc", "a_b_c"),
    ])
    func fileNamesAreAPlainNameInTheDirectory(name: String, expected: String) {
        #expect(ReceivedFiles.fileName(for: name) == expected)
    }

    @Test func longNamesAreCutTo200Bytes() {
        let name = ReceivedFiles.fileName(for: String(repeating: "é", count: 300) + ".txt")
        #expect(name.utf8.count <= 200 && name.hasSuffix(".txt"))
    }

    @Test func aReceivedFileNeverReplacesAnExistingOne() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("mp-app-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let files = try ReceivedFiles(path: root.appendingPathComponent("inbox").path)
        var stored: [URL] = []
        for index in 0..<3 {
            let incoming = root.appendingPathComponent("incoming-\(index)")
            try Data([UInt8(index)]).write(to: incoming)
            stored.append(try files.store(incoming, sentAs: "../report.pdf"))
        }
        #expect(stored.map(\.lastPathComponent) == ["report.pdf", "report (1).pdf", "report (2).pdf"])
        #expect(try stored.map { try Data(contentsOf: $0) } == [Data([0]), Data([1]), Data([2])])
        #expect(stored.allSatisfy { $0.deletingLastPathComponent().standardizedFileURL == files.directory })
    }
}
