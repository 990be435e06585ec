/// A first-in, first-out queue on an array: taking from the front moves a head index, and the
/// array is compacted once most of it has been taken, so each element costs O(1) on average.
public struct FIFO<Element> {
    private var items: [Element] = []
    private var head = 0

    public init() {}

    public var isEmpty: Bool { head == items.count }
    public var count: Int { items.count - head }

    public mutating func append(_ item: Element) { items.append(item) }
    public mutating func append(contentsOf more: [Element]) { items.append(contentsOf: more) }

    public mutating func popFirst() -> Element? {
        guard head < items.count else { return nil }
        let item = items[head]
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 4_096 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
        return item
    }

    /// Everything still queued, oldest first, leaving the queue empty.
    public mutating func removeAll() -> [Element] {
        defer {
            items.removeAll()
            head = 0
        }
        return Array(items[head...])
    }
}
