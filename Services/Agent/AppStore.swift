import Auth
import Foundation
import HubProtocol
import Storage

/// An app registered with the agent as its UnifiedPush distributor.
struct RegisteredApp: Equatable {
    /// The connection token the app's connector chose; it names the registration.
    var token: String
    /// The app's D-Bus service name, where its connector is.
    var service: String
    var description: String?
    /// Its VAPID public key, when it gave one: then only pushes signed with it are taken.
    var vapid: String?
    /// 2: org.unifiedpush.Connector2; 1: Connector1.
    var connector: Int
    /// The endpoint URL's last segment: the capability its server pushes with.
    var secret: String
    var endpointId: String { PushEndpointSecret.id(of: secret) }

    init(token: String, service: String, description: String?, vapid: String?, connector: Int, secret: String) {
        self.token = token
        self.service = service
        self.description = description
        self.vapid = vapid
        self.connector = connector
        self.secret = secret
    }

    /// The app a Register call names, under `secret`.
    init(_ registration: UnifiedPushRegistration, secret: String) {
        self.init(
            token: registration.token, service: registration.service, description: registration.description, vapid: registration.vapid,
            connector: registration.connector, secret: secret)
    }
}

/// A push message on its way to an app, kept until the app has it or it expires.
struct AppMessage: Equatable {
    var deliveryId: String
    var notificationId: String
    var endpointId: String
    var message: Data
    var expiresAt: Date
    /// Acknowledged to the hub already: the app could not be reached, so the agent keeps it.
    var held: Bool
    var urgency: PushUrgency = .normal
}

/// The apps and their messages, in the agent's store (`agent.db`).
struct AppStore {
    let database: SQLiteDatabase

    func apps() throws -> [RegisteredApp] {
        try database.query("SELECT token, service, description, vapid, connector, secret FROM apps ORDER BY registered_at, token").map(Self.app)
    }

    func app(token: String) throws -> RegisteredApp? {
        try database.queryOne("SELECT token, service, description, vapid, connector, secret FROM apps WHERE token = ?", [token]).map(Self.app)
    }

    func app(endpointId: String) throws -> RegisteredApp? {
        try database.queryOne(
            "SELECT token, service, description, vapid, connector, secret FROM apps WHERE endpoint_id = ?", [endpointId]
        ).map(Self.app)
    }

    private static func app(_ row: Row) throws -> RegisteredApp {
        RegisteredApp(
            token: try row.string("token", of: "apps"), service: try row.string("service", of: "apps"),
            description: try row.optionalString("description", of: "apps"), vapid: try row.optionalString("vapid", of: "apps"),
            connector: try row.int("connector", of: "apps"), secret: try row.string("secret", of: "apps"))
    }

    func save(_ app: RegisteredApp, now: Date) throws {
        try database.run(
            """
            INSERT INTO apps (token, service, description, vapid, connector, secret, endpoint_id, registered_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (token) DO UPDATE SET service = excluded.service, description = excluded.description,
              vapid = excluded.vapid, connector = excluded.connector
            """,
            [app.token, app.service, app.description, app.vapid, app.connector, app.secret, app.endpointId, now.timeIntervalSince1970])
    }

    /// Forgets the app and what was on its way to it.
    func remove(token: String) throws {
        try database.transaction {
            if let app = try app(token: token) {
                try database.run("DELETE FROM app_messages WHERE endpoint_id = ?", [app.endpointId])
            }
            try database.run("DELETE FROM apps WHERE token = ?", [token])
        }
    }

    /// Keeps a message; false when it is kept already.
    func keep(_ message: AppMessage) throws -> Bool {
        try database.run(
            """
            INSERT OR IGNORE INTO app_messages (delivery_id, notification_id, endpoint_id, message, expires_at, held, urgency)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """,
            [message.deliveryId, message.notificationId, message.endpointId, message.message, message.expiresAt.timeIntervalSince1970,
             message.held, Self.rank(message.urgency)]) > 0
    }

    func message(deliveryId: String) throws -> AppMessage? {
        try database.queryOne(
            "SELECT delivery_id, notification_id, endpoint_id, message, expires_at, held, urgency FROM app_messages WHERE delivery_id = ?",
            [deliveryId]
        ).map(Self.message)
    }

    /// An app's unexpired messages of at least `urgency`, in the order they came.
    func messages(endpointId: String, now: Date, limit: Int, urgency: PushUrgency = .veryLow) throws -> [AppMessage] {
        try database.query(
            """
            SELECT delivery_id, notification_id, endpoint_id, message, expires_at, held, urgency FROM app_messages
            WHERE endpoint_id = ? AND expires_at > ? AND urgency >= ? ORDER BY seq LIMIT ?
            """,
            [endpointId, now.timeIntervalSince1970, Self.rank(urgency), limit]
        ).map(Self.message)
    }

    static func rank(_ urgency: PushUrgency) -> Int { PushUrgency.allCases.firstIndex(of: urgency) ?? 2 }

    private static func message(_ row: Row) throws -> AppMessage {
        let table = "app_messages"
        return AppMessage(
            deliveryId: try row.string("delivery_id", of: table), notificationId: try row.string("notification_id", of: table),
            endpointId: try row.string("endpoint_id", of: table), message: try row.data("message", of: table),
            expiresAt: try row.date("expires_at", of: table), held: try row.bool("held", of: table),
            urgency: PushUrgency.allCases[max(0, min(3, try row.int("urgency", of: table)))])
    }

    /// The app has it: forgotten, and the delivery noted as shown, so a resend is acknowledged without a second hand-over.
    func handed(_ message: AppMessage, now: Date) throws {
        try database.transaction {
            try database.run("DELETE FROM app_messages WHERE delivery_id = ?", [message.deliveryId])
            try database.run(
                "INSERT OR IGNORE INTO seen (delivery_id, notification_id, seen_at) VALUES (?, ?, ?)",
                [message.deliveryId, message.notificationId, now.timeIntervalSince1970])
        }
    }

    /// Takes the app's unheld messages (those below `urgency`, or all), but those `except`, into the
    /// agent's keeping; returns their delivery ids, to acknowledge.
    func hold(endpointId: String, except: Set<String>, below urgency: PushUrgency? = nil) throws -> [String] {
        try database.transaction {
            let ids = try database.query(
                "SELECT delivery_id FROM app_messages WHERE endpoint_id = ? AND held = 0 AND urgency < ? ORDER BY seq",
                [endpointId, urgency.map(Self.rank) ?? 4]
            ).map { try $0.string("delivery_id", of: "app_messages") }.filter { !except.contains($0) }
            for id in ids { try database.run("UPDATE app_messages SET held = 1 WHERE delivery_id = ?", [id]) }
            return ids
        }
    }

    func waiting(endpointId: String) throws -> Int {
        guard let row = try database.queryOne("SELECT count(*) AS n FROM app_messages WHERE endpoint_id = ?", [endpointId]) else { return 0 }
        return try row.int("n", of: "app_messages")
    }

    /// Forgets messages past their time to live; returns the delivery ids not acknowledged yet, to report.
    func purge(now: Date) throws -> [String] {
        try database.transaction {
            let open = try database.query("SELECT delivery_id FROM app_messages WHERE expires_at <= ? AND held = 0", [now.timeIntervalSince1970])
                .map { try $0.string("delivery_id", of: "app_messages") }
            try database.run("DELETE FROM app_messages WHERE expires_at <= ?", [now.timeIntervalSince1970])
            return open
        }
    }

    /// The endpoints to register with the installation.
    func endpoints() throws -> [String: PushEndpoint] {
        Dictionary(try apps().map { ($0.endpointId, PushEndpoint(vapid: $0.vapid)) }, uniquingKeysWith: { first, _ in first })
    }
}
