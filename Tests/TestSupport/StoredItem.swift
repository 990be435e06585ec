import Foundation
import Storage

/// The full row of the table `items` that both engines' row tests keep (id 7), read through each
/// accessor for a required value, so that both engines are held to the same readings.
public struct StoredItem: Equatable, Sendable {
    public enum Shade: String, Sendable { case light, dark }

    public var id: Int
    public var id64: Int64
    public var sequence: UInt64
    public var name: String
    public var at: Date
    public var body: Data
    public var flag: Bool
    public var shade: Shade

    /// What the row of id 7 holds.
    public static let seven = StoredItem(
        id: 7, id64: 7, sequence: 7, name: "seven", at: Date(timeIntervalSince1970: 1_700_000_000.5), body: Data([0, 1]), flag: true,
        shade: .dark)

    public init(id: Int, id64: Int64, sequence: UInt64, name: String, at: Date, body: Data, flag: Bool, shade: Shade) {
        (self.id, self.id64, self.sequence, self.name, self.at, self.body, self.flag, self.shade) = (id, id64, sequence, name, at, body, flag, shade)
    }

    public init(_ row: some StoredRow) throws {
        let table = "items"
        id = try row.int("id", of: table)
        id64 = try row.int64("id", of: table)
        sequence = try row.sequence("id", of: table)
        name = try row.string("name", of: table)
        at = try row.date("at", of: table)
        body = try row.data("body", of: table)
        flag = try row.bool("flag", of: table)
        shade = try row.string("shade", of: table, as: Shade.self)
    }
}
