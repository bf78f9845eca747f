import CMultipeerOpenSSL
import MultipeerWire

/// The two application traffic secrets of a handshake, taken from OpenSSL's key-log callback
/// (OpenSSL 3.0 has no other way to hand them out), so that the engine protects records itself.
/// Nothing is written anywhere: the callback keeps the two secrets in wiped memory and ignores
/// every other line. Package-visible for the differential fuzz target, which runs OpenSSL's record
/// layer beside this library's with the secrets taken here.
package final class TLSTrafficSecretCapture {
    package private(set) var client: SecureBytes?
    package private(set) var server: SecureBytes?

    package init() {}

    /// The SSL ex-data slot that points at the engine's capture.
    static let exDataIndex: Int32 = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, nil, nil, nil, nil)

    private static let clientLabel = Array("CLIENT_TRAFFIC_SECRET_0 ".utf8)
    private static let serverLabel = Array("SERVER_TRAFFIC_SECRET_0 ".utf8)
    /// The client random between label and secret, in hex.
    private static let randomHexLength = 64

    /// Points `ssl`'s ex-data at this capture; it must outlive the handshake.
    package func attach(to ssl: OpaquePointer) throws(SecurityError) {
        guard Self.exDataIndex >= 0, SSL_set_ex_data(ssl, Self.exDataIndex, Unmanaged.passUnretained(self).toOpaque()) == 1 else {
            throw SecurityError.openSSL(.internalError, "SSL_set_ex_data failed")
        }
    }

    /// Drops both secrets (wiped as they are released).
    package func clear() {
        client = nil
        server = nil
    }

    /// One key-log line: `LABEL <client random hex> <secret hex>`.
    fileprivate func note(_ line: UnsafePointer<CChar>) {
        let length = strlen(line)
        let bytes = UnsafeRawBufferPointer(start: line, count: length)
        for (label, isClient) in [(Self.clientLabel, true), (Self.serverLabel, false)] {
            guard length > label.count, bytes.starts(with: label) else { continue }
            let secretStart = label.count + Self.randomHexLength + 1
            guard length > secretStart, bytes[secretStart - 1] == UInt8(ascii: " ") else { return }
            guard let secret = Self.decodeHex(UnsafeRawBufferPointer(rebasing: bytes[secretStart...])) else { return }
            if isClient { client = secret } else { server = secret }
            return
        }
    }

    private static func decodeHex(_ hex: UnsafeRawBufferPointer) -> SecureBytes? {
        guard hex.count % 2 == 0, hex.count / 2 == 32 || hex.count / 2 == 48 else { return nil }
        var valid = true
        let decoded = SecureBytes(count: hex.count / 2) { out in
            for index in 0..<out.count {
                guard let high = HexDigits.value(hex[2 * index]), let low = HexDigits.value(hex[2 * index + 1]) else {
                    valid = false
                    return
                }
                out[index] = high << 4 | low
            }
        }
        return valid ? decoded : nil
    }
}

/// Installed on every context; finds the connection's capture through the SSL's ex-data.
package let captureTrafficSecret: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> Void = { ssl, line in
    guard let ssl, let line, TLSTrafficSecretCapture.exDataIndex >= 0,
        let capture = SSL_get_ex_data(ssl, TLSTrafficSecretCapture.exDataIndex)
    else { return }
    Unmanaged<TLSTrafficSecretCapture>.fromOpaque(capture).takeUnretainedValue().note(line)
}
