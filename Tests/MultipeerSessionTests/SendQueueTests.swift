@testable import MultipeerSession
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

@Suite("Send queue (batches sends onto the event loop)")
struct SendQueueTests {
    @Test func onlyTheFirstItemOfABatchAsksForADrain() {
        let queue = SendQueue<Int>()
        #expect(queue.enqueue(1))
        #expect(!queue.enqueue(2))
        #expect(!queue.enqueue(3))
        #expect(queue.takeAll() == [1, 2, 3])
        // Drained: the next item needs a new drain.
        #expect(queue.enqueue(4))
        #expect(queue.takeAll() == [4])
        #expect(queue.takeAll() == [])
    }
}
