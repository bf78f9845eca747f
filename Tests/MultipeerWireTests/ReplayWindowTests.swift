import MultipeerTestSupport
import MultipeerWire
import Testing

@Suite("Replay window (security catalogue items 5 and 6)")
struct ReplayWindowTests {
    @Test func agreesWithASetModelOverAMillionCounters() {
        var window = ReplayWindow()
        var seen = Set<UInt64>()
        var highest: UInt64 = 0
        var generator = SeededGenerator(seed: 5)
        var accepted = 0
        for _ in 0..<1_000_000 {
            // Mostly forward with jitter, some replays of recent and very old counters.
            let counter: UInt64
            switch UInt64.random(in: 0..<10, using: &generator) {
            case 0: counter = highest > 20_000 ? highest - UInt64.random(in: 9_000...20_000, using: &generator) : 0
            case 1: counter = highest >= 100 ? highest - UInt64.random(in: 0...100, using: &generator) : highest
            default: counter = highest + UInt64.random(in: 0...40, using: &generator)
            }
            // The model: new, and either above everything seen or less than a window below the top.
            let modelAccepts = seen.isEmpty || (!seen.contains(counter) && (counter > highest || highest - counter < UInt64(window.size)))
            #expect(window.accepts(counter) == modelAccepts)
            if modelAccepts {
                window.commit(counter)
                seen.insert(counter)
                highest = max(highest, counter)
                accepted += 1
            }
            if seen.count > 50_000 { seen = seen.filter { $0 + UInt64(window.size) * 2 > highest } }
        }
        #expect(accepted > 500_000)
    }

    @Test func everyReplayIsRejectedAndReorderingInsideTheWindowAccepted() {
        var window = ReplayWindow(size: 2_048)
        for counter in stride(from: UInt64(0), to: 1_000, by: 2) { window.commit(counter) }
        for counter in stride(from: UInt64(1), to: 1_000, by: 2) { #expect(window.accepts(counter)) }
        for counter in stride(from: UInt64(0), to: 1_000, by: 2) { #expect(!window.accepts(counter)) }
        window.commit(5_000)
        #expect(!window.accepts(5_000 - 2_049))
        #expect(window.accepts(5_000 - 2_047))
        #expect(!window.accepts(5_000))
    }

    @Test func aForgeryFarAheadChangesNothingUntilCommitted() {
        var window = ReplayWindow()
        window.commit(10)
        // A forged counter far ahead passes the check but is never committed (it failed to open) ...
        #expect(window.accepts(1 << 40))
        // ... so the next genuine datagram is still accepted (the flynn/noise bug).
        #expect(window.accepts(11))
        window.commit(11)
        #expect(!window.accepts(11))
    }

    @Test func hugeJumpsClearTheWindow() {
        var window = ReplayWindow(size: 64)
        for counter in 0..<64 { window.commit(UInt64(counter)) }
        window.commit(UInt64.max - 1)
        #expect(!window.accepts(0))
        #expect(window.accepts(UInt64.max))
        #expect(window.accepts(UInt64.max - 2))
        #expect(!window.accepts(UInt64.max - 1))
    }
}

@Suite("Replay window at the top of the counter range (a remote crash before)")
struct ReplayWindowEdgeTests {
    @Test(arguments: [UInt64.max, UInt64.max - 1, UInt64.max - 2, UInt64.max - 64, UInt64.max - 8_191, UInt64.max - 8_192])
    func commitsNearTheMaximumWithoutTrapping(counter: UInt64) {
        var window = ReplayWindow()
        #expect(window.accepts(counter))
        window.commit(counter)
        #expect(!window.accepts(counter))
        // A second commit of the same counter, and of every neighbour, is harmless.
        window.commit(counter)
        if counter < .max {
            #expect(window.accepts(counter + 1))
            window.commit(counter + 1)
            #expect(!window.accepts(counter + 1))
        }
        #expect(window.accepts(counter - 1))
        window.commit(counter - 1)
        #expect(!window.accepts(counter - 1))
    }

    @Test func fromZeroStraightToTheMaximum() {
        var window = ReplayWindow(size: 64)
        window.commit(0)
        window.commit(.max)
        #expect(!window.accepts(.max))
        #expect(!window.accepts(0))
        #expect(window.accepts(.max - 63))
        #expect(!window.accepts(.max - 64))
        window.commit(.max - 63)
        #expect(!window.accepts(.max - 63))
    }

    @Test func slidingToTheMaximumInSmallStepsClearsOldSlots() {
        var window = ReplayWindow(size: 64)
        window.commit(.max - 200)
        for distance in stride(from: UInt64(150), through: 0, by: -10) {
            let counter = UInt64.max - distance
            #expect(window.accepts(counter))
            window.commit(counter)
        }
        window.commit(.max)
        // Slot reuse: .max - 64 maps to the same bit as .max but is outside the window.
        #expect(!window.accepts(.max - 64))
        #expect(window.accepts(.max - 1))
    }
}
