#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CMultipeerShims
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
    /// Bytes before this offset were handed to write-back (`writeBack(through:)`); only the
    /// one writer of a received file uses it, one batch at a time.
    private var writeBackStart: UInt64 = 0

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

    /// Writes `chunks` in order from `offset`, up to `IOV_MAX` of them a system call. Returns how
    /// many bytes landed, and the error that stopped it short, if one did.
    func write(_ chunks: ArraySlice<ByteBuffer>, at offset: UInt64) -> (landed: Int, error: FileIOError?) {
        var vectors: [iovec] = []
        var storages: [Unmanaged<AnyObject>] = []
        vectors.reserveCapacity(chunks.count)
        storages.reserveCapacity(chunks.count)
        defer { for storage in storages { storage.release() } }
        for chunk in chunks where chunk.readableBytes > 0 {
            chunk.withUnsafeReadableBytesWithStorageManagement { raw, storage in
                storages.append(storage.retain())
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress), iov_len: raw.count))
            }
        }
        var landed = 0
        var next = 0
        while next < vectors.count {
            let count = min(vectors.count - next, Self.maximumVectors)
            let result = vectors.withUnsafeMutableBufferPointer { all in
                pwritev(descriptor, all.baseAddress! + next, Int32(count), off_t(offset) + off_t(landed))
            }
            if result < 0 {
                if errno == EINTR { continue }
                return (landed, FileIOError(operation: "write", code: errno))
            }
            landed += result
            // Past what landed: whole vectors skipped, a partly written one trimmed.
            var left = result
            while next < vectors.count, left >= vectors[next].iov_len {
                left -= vectors[next].iov_len
                next += 1
            }
            if left > 0 {
                vectors[next].iov_base += left
                vectors[next].iov_len -= left
            }
        }
        return (landed, nil)
    }

    /// Linux's IOV_MAX, which Swift's Glibc does not export.
    static let maximumVectors = 1024
    /// A received file goes to storage this many bytes at a time as it grows (see `writeBack`).
    static let writeBackWindow: UInt64 = 8 << 20

    /// Hands each whole window written since the last call to write-back, and waits for the
    /// window before it, so the final `sync` finds at most about two windows left to write and
    /// the page cache holds no more dirty bytes of the file than that. Write-back errors are
    /// left to `sync`, which reports them.
    func writeBack(through end: UInt64) {
        while end >= writeBackStart + Self.writeBackWindow {
            _ = mp_start_write_back(descriptor, Int64(writeBackStart), Int64(Self.writeBackWindow))
            if writeBackStart >= Self.writeBackWindow {
                _ = mp_finish_write_back(descriptor, Int64(writeBackStart - Self.writeBackWindow), Int64(Self.writeBackWindow))
            }
            writeBackStart += Self.writeBackWindow
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
