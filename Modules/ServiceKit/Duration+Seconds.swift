/// A duration as a number of seconds, for rates, metrics and timeouts given as `Double`.
extension Duration {
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
