import HubProtocol

extension PostgresConnection {
    /// The number a sequence row holds: `table` (schema-qualified) has one row, id 1, whose column
    /// `sequence` the writers of every process count up.
    public func sequence(in table: String) throws(PostgresError) -> UInt64 {
        try queryRow("SELECT sequence FROM \(table) WHERE id = 1") { row throws(HubError) in try row.sequence("sequence", of: table) }
    }

    /// Counts the sequence row in `table` up by one and returns the new number. The row stays
    /// locked until the transaction ends, so writers that take their number first in each
    /// transaction, in whatever process, commit in the order of their numbers and without gaps (a
    /// transaction that rolls back gives its number back): a reader never sees a number before
    /// the ones below it.
    public func nextSequence(in table: String) throws(PostgresError) -> UInt64 {
        try queryRow("UPDATE \(table) SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence") { row throws(HubError) in
            try row.sequence("sequence", of: table)
        }
    }
}
