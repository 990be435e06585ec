/// Resuming what push services had not taken when the dispatcher stopped, a page at a time: the
/// next page once most of the last one is done (the push center takes each delivery once,
/// however often it is handed in).
struct PushResume: Equatable {
    static let page = 100_000
    private(set) var resuming = true

    /// The page to read now, or nil.
    func limit(pushPending: Int) -> Int? {
        resuming && pushPending < Self.page / 2 ? Self.page : nil
    }

    /// A page of `count` was read: a full page means there may be more.
    mutating func read(_ count: Int) { resuming = count == Self.page }
}
