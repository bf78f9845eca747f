import ArgumentParser

/// `multipeer`: chat and file transfer between authenticated peers on a LAN, over the
/// library's Apple-shaped API (discovery, invitations, trust with pairing codes, resources).
@main
struct Multipeer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "multipeer",
        abstract: "Chat and send files between nearby peers, found over mDNS, authenticated and encrypted.",
        subcommands: [ChatCommand.self, SendCommand.self, ReceiveCommand.self]
    )
}
