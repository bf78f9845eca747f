#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import Synchronization
import MultipeerProtocol

/// Positioned reads and writes on a file descriptor, run on a thread pool (never on an event
/// loop). Errors carry errno's text, never file contents.
package struct FileIOError: Error, CustomStringConvertible {
    let operation: String
    let code: Int32
    package var description: String { "\(operation): \(String(cString: strerror(code)))" }
}

/// One open file; closed on `close()` or when released.
package final class OpenFile: @unchecked Sendable {
    private(set) var descriptor: Int32
    /// Told how many bytes each read returned, when a test watches the file's directory.
    private let readObserver: (@Sendable (Int) -> Void)?

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        readObserver = FileReads.observer(for: path)
    }

    deinit { close() }

    static func openForReading(_ path: String) throws(FileIOError) -> (OpenFile, size: UInt64, modified: Int64) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw FileIOError(operation: "open", code: errno) }
        let file = OpenFile(descriptor: descriptor, path: path)
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw FileIOError(operation: "fstat", code: errno) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw FileIOError(operation: "open (not a regular file)", code: EINVAL) }
        let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        return (file, UInt64(info.st_size), modified)
    }

    /// Creates a new file that did not exist, readable by its owner only.
    package static func create(_ path: String) throws(FileIOError) -> OpenFile {
        let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw FileIOError(operation: "create", code: errno) }
        return OpenFile(descriptor: descriptor, path: path)
    }

    static func openForUpdate(_ path: String) throws(FileIOError) -> OpenFile {
        let descriptor = open(path, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { throw FileIOError(operation: "open", code: errno) }
        return OpenFile(descriptor: descriptor, path: path)
    }

    /// Reads exactly `count` bytes at `offset` (fewer only at the end of the file).
    func read(count: Int, at offset: UInt64) throws(FileIOError) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        var total = 0
        while total < count {
            let got = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count - total) { raw in
                pread(descriptor, raw.baseAddress, count - total, off_t(offset) + off_t(total))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw FileIOError(operation: "read", code: errno)
            }
            if got == 0 { break }
            total += got
        }
        readObserver?(total)
        return buffer
    }

    func write(_ bytes: ByteBuffer, at offset: UInt64) throws(FileIOError) {
        var written = 0
        let count = bytes.readableBytes
        while written < count {
            let result = bytes.withUnsafeReadableBytes { raw in
                pwrite(descriptor, raw.baseAddress! + written, count - written, off_t(offset) + off_t(written))
            }
            if result < 0 {
                if errno == EINTR { continue }
                throw FileIOError(operation: "write", code: errno)
            }
            written += result
        }
    }

    func size() throws(FileIOError) -> UInt64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw FileIOError(operation: "fstat", code: errno) }
        return UInt64(info.st_size)
    }

    func truncate(to length: UInt64) throws(FileIOError) {
        guard ftruncate(descriptor, off_t(length)) == 0 else { throw FileIOError(operation: "truncate", code: errno) }
    }

    func sync() throws(FileIOError) {
        guard fsync(descriptor) == 0 else { throw FileIOError(operation: "fsync", code: errno) }
    }

    func close() {
        if descriptor >= 0 {
            systemClose(descriptor)
            descriptor = -1
        }
    }
}

private func systemClose(_ descriptor: Int32) {
    _ = close(descriptor)
}

/// Tests count the bytes read from the files under a directory, through whatever handle reads
/// them (what a resume reads back of kept partials). Looked up as a file opens.
package enum FileReads {
    private static let watches = Mutex<[(directory: String, count: @Sendable (Int) -> Void)]>([])
    /// Whether any test watches: most processes never do, and pay one load per open.
    private static let watching = Atomic<Bool>(false)

    /// Counts the bytes of every read of a file opened under `directory` from now until `unwatch`.
    package static func watch(_ directory: String, _ count: @escaping @Sendable (Int) -> Void) {
        watches.withLock { watches in
            watches.append((directory + "/", count))
            watching.store(true, ordering: .sequentiallyConsistent)
        }
    }

    package static func unwatch(_ directory: String) {
        watches.withLock { watches in
            watches.removeAll { $0.directory == directory + "/" }
            watching.store(!watches.isEmpty, ordering: .sequentiallyConsistent)
        }
    }

    static func observer(for path: String) -> (@Sendable (Int) -> Void)? {
        guard watching.load(ordering: .sequentiallyConsistent) else { return nil }
        return watches.withLock { $0.first { path.hasPrefix($0.directory) }?.count }
    }
}

enum FileNames {
    static func remove(_ path: String) {
        _ = unlink(path)
    }

    static func size(of path: String) -> UInt64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return UInt64(info.st_size)
    }
}
