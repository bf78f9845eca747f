import Foundation
import MultipeerTestSupport
import Testing

/// The advertiser assistant and the browser model end to end, found over mDNS in a network
/// namespace of the test's own (`multipeer-demo assistant`): the prompt accepts one inviter and
/// declines another, an assistant without a prompt accepts, the maximum stops invitations, and
/// Done and Cancel reach the delegates.
@Suite("Assistant and browser model over mDNS", .serialized)
struct AssistantNamespaceTests {
    @Test func anAssistantAndBrowserModelsInANamespaceOfTheirOwn() async throws {
        let namespace = "mpasst-test-\(getpid())"
        let ip = URL(fileURLWithPath: "/usr/sbin/ip")
        try #require(await BuiltProducts.run(ip, ["netns", "add", namespace]).0 == 0)
        defer { _ = try? BuiltProducts.runBlocking(ip, ["netns", "delete", namespace]) }
        _ = try await BuiltProducts.run(ip, ["netns", "exec", namespace, "ip", "link", "set", "lo", "up", "multicast", "on"])
        _ = try await BuiltProducts.run(ip, ["netns", "exec", namespace, "ip", "route", "add", "224.0.0.0/4", "dev", "lo"])
        let demo = try BuiltProducts.executable("multipeer-demo").path
        let (status, text) = try await BuiltProducts.run(ip, ["netns", "exec", namespace, demo, "assistant", "lo"], seconds: 120)
        #expect(status == 0, "\(text)")
        for scenario in ["found", "done-unavailable", "accept", "maximum", "decline", "presented", "no-prompt", "done", "cancel"] {
            #expect(text.contains("OK \(scenario) "), "\(scenario): \(text)")
        }
        #expect(text.contains("ASSISTANT PASSED"))
    }
}
