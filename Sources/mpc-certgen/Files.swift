import ArgumentParser
import Foundation
import MultipeerCrypto

/// Reading inputs and writing outputs safely: no silent overwrite, private keys 0600.
enum Files {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func readBytes(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Failure(description: "cannot read \(path)")
        }
        return [UInt8](data)
    }

    static func readText(_ path: String) throws -> String {
        String(decoding: try readBytes(path), as: UTF8.self)
    }

    static func makeDirectory(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: nil)
    }

    /// Checks every output up front, so a refused run writes nothing.
    static func checkWritable(_ paths: [String], force: Bool) throws {
        guard !force else { return }
        for path in paths where FileManager.default.fileExists(atPath: path) {
            throw Failure(description: "\(path) exists; refusing to overwrite it (use --force)")
        }
    }

    /// Writes with the given mode from the start, so a key is never readable by others, even briefly.
    static func write(_ bytes: [UInt8], to path: String, mode: mode_t, force: Bool) throws {
        if force { unlink(path) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, mode)
        guard descriptor >= 0 else {
            throw Failure(description: "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            guard written > 0 else { throw Failure(description: "cannot write \(path)") }
            offset += written
        }
        fchmod(descriptor, mode)
    }

    static func writePublic(_ text: String, to path: String, force: Bool) throws {
        try write(Array(text.utf8), to: path, mode: 0o644, force: force)
    }

    static func writePrivate(_ bytes: [UInt8], to path: String, force: Bool) throws {
        try write(bytes, to: path, mode: 0o600, force: force)
    }

    static func join(_ directory: String, _ name: String) -> String {
        (directory as NSString).appendingPathComponent(name)
    }
}

/// A CA read from files: its certificate, key, and the chain above it.
struct LoadedAuthority {
    let certificate: Certificate
    let key: PrivateKey
    /// The CA's own certificate and anything above it except a self-signed root.
    let chainAbovePeers: [Certificate]

    init(certificatePath: String, keyPath: String, passphrase: String?) throws {
        let certificates = try Certificate.chain(pemEncoded: Files.readText(certificatePath))
        guard let certificate = certificates.first else {
            throw Files.Failure(description: "\(certificatePath) holds no certificate")
        }
        guard certificate.isCertificateAuthority else {
            throw Files.Failure(description: "\(certificatePath) is not a CA certificate")
        }
        key = try PrivateKey(pemEncoded: Files.readText(keyPath), passphrase: passphrase)
        guard key.matches(certificate) else {
            throw Files.Failure(description: "\(keyPath) is not the key of \(certificatePath)")
        }
        self.certificate = certificate
        chainAbovePeers = certificates.filter { $0.subject != $0.issuer }
    }
}
