import Testing

@testable import DispatchCore

@Suite("Delivery keys")
struct DeliveryKeyTests {
    @Test("a key equals another exactly when their ids are equal, as strings compare, and equal keys hash alike")
    func equality() {
        #expect(DeliveryKey("n/i/default") == DeliveryKey("n/i/default"))
        #expect(DeliveryKey("n/i/default") != DeliveryKey("n/i/defaulT"))
        #expect(DeliveryKey("n/i/default") != DeliveryKey("n/i/default/"))
        // Swift's strings compare by canonical equivalence; keys follow them.
        let composed = DeliveryKey("n/caf\u{E9}/t"), decomposed = DeliveryKey("n/cafe\u{301}/t")
        #expect(composed == decomposed && composed.hashValue == decomposed.hashValue)
        #expect(DeliveryKey("") == "" && DeliveryKey("x").description == "x")
    }

    @Test("sets and tables of keys hold what sets of their ids hold, through inserts and removals")
    func behavesAsItsIds() {
        var generator = SystemRandomNumberGenerator()
        var keys = Set<DeliveryKey>(), ids = Set<String>()
        var table: [DeliveryKey: Int] = [:]
        for round in 0..<20_000 {
            let id = "n\(Int.random(in: 0..<50, using: &generator))/i\(Int.random(in: 0..<200, using: &generator))/default"
            if Bool.random(using: &generator) {
                #expect(keys.insert(DeliveryKey(id)).inserted == ids.insert(id).inserted)
                table[DeliveryKey(id)] = round
            } else {
                #expect((keys.remove(DeliveryKey(id)) != nil) == (ids.remove(id) != nil))
                table[DeliveryKey(id)] = nil
            }
        }
        #expect(Set(keys.map(\.id)) == ids && Set(table.keys.map(\.id)) == ids)
    }
}
