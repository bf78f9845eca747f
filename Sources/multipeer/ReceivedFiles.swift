import Foundation

/// Where received files go: under a name made from the sender's (never a path of its choosing),
/// never over an existing file.
struct ReceivedFiles: Sendable {
    let directory: URL

    /// Makes the directory if it is missing.
    init(path: String) throws(AppFailure) {
        directory = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw AppFailure(.setup, "cannot use \(path) for received files: \(error.localizedDescription)")
        }
    }

    /// Moves a verified file from the session's directory to ours; returns where it went.
    func store(_ file: URL, sentAs name: String) throws -> URL {
        let base = Self.fileName(for: name)
        let stem = (base as NSString).deletingPathExtension
        let suffix = (base as NSString).pathExtension
        for attempt in 0..<1_000 {
            let candidate = attempt == 0 ? base : "\(stem) (\(attempt))" + (suffix.isEmpty ? "" : ".\(suffix)")
            let destination = directory.appendingPathComponent(candidate)
            guard !FileManager.default.fileExists(atPath: destination.path) else { continue }
            try FileManager.default.moveItem(at: file, to: destination)
            return destination
        }
        throw CocoaError(.fileWriteFileExists)
    }

    /// A plain file name from the sender's name: no directories, no hidden or empty names, no
    /// control characters, at most 200 bytes.
    static func fileName(for name: String) -> String {
        let last = name.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
        var cleaned = String(String.UnicodeScalarView(last.unicodeScalars.map { scalar in
            scalar.value < 0x20 || scalar.value == 0x7F ? "_" : scalar
        }))
        while cleaned.hasPrefix(".") { cleaned.removeFirst() }
        while cleaned.utf8.count > 200 { cleaned.removeFirst() }
        return cleaned.isEmpty ? "received-file" : cleaned
    }
}
