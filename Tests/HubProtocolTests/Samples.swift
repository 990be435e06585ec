import Foundation
import HubProtocol

/// One sample of every message type, with every optional field set, so the fixtures pin them all.
enum Samples {
    static let instant = Date(timeIntervalSince1970: 1_780_000_000.25)
    static let later = Date(timeIntervalSince1970: 1_780_086_400)

    static let installation = Installation(
        installationId: "inst-1", platform: "linux", pushChannel: "agent-inst-1", tags: ["World", "Sports"],
        userId: "alice",
        templates: [
            "news": InstallationTemplate(
                body: #"{"aps":{"alert":"$(messageParam)"}}"#, expiry: "$(expiry)", tags: ["World"],
                headers: ["X-Priority": "high"])
        ], expirationTime: later, createdAt: instant, lastSeen: instant,
        endpoints: ["q1Fo3-uw8XlE8Nk3yXcdnXGdPU0mxJyrwZ6pYmVDXtU": PushEndpoint(vapid: "BDd3_hVL9fZi9Ybo2UUzA284WG5FZR30_95YeZJsiApwXKpNcF1rRPF3foIiBHXRdJI2Qhumhf6_LFTeZaNndIo")])

    static let userNotification = UserNotification(
        id: "un-1", appNotificationId: "app-1", userId: "alice", visual: VisualContent(title: "Hi", body: "There"),
        raw: #"{"k":1}"#, encrypted: "ZW5jcnlwdGVk", keyId: "a2V5LWlk", priority: "high", group: "chat", expiresAt: later, readState: .read,
        userActionState: .dismissed, createdAt: instant, modifiedAt: later)

    static let job = HubJob(
        jobId: "01a24cd9-9c57-7277-95fc-62dfab68bb2e", type: .importCreate, status: .completed, progress: 100,
        importFile: "/srv/import/devices.jsonl", outputDirectory: "/srv/import/out", createdAt: instant, updatedAt: later, processed: 10_000,
        applied: 9_990, failed: 10, failure: "the input cannot be read", outputFile: "/srv/import/out/job/Output.txt",
        failedFile: "/srv/import/out/job/Failed.txt")

    static let sendOfHub: SendNotification = {
        var send = SendNotification(
            idempotencyKey: "k-1", format: .template, body: nil, properties: ["messageParam": "Breaking News!"],
            tagExpression: "World && !Sports", installationId: nil, userId: nil, timeToLive: 3600,
            scheduledAt: later)
        send.hub = "news"
        return send
    }()

    static let policy = HubPolicy(
        name: "DefaultListenSharedAccessSignature", rights: ["Listen"], key: "cHJpbWFyeQ==", secondaryKey: "c2Vjb25kYXJ5")
    static let hub = HubDescription(
        name: "news", createdAt: instant, policies: [policy], generation: 2,
        limits: HubLimits(requestsPerSecond: 100, sendsPerSecond: 10, installations: 1_000))

    /// Every message type with its fixture name, which is its type name.
    static let all: [any HubMessage] = [
        HealthRequest(),
        HealthReply(
            service: "nh-registry", status: "ok", version: "0.1.0", pid: 42, uptimeSeconds: 1.5,
            endpoints: ["requests": "tcp://127.0.0.1:7701"], details: ["installations": "3"]),
        ErrorReply(code: .unknownType, message: "this service does not answer 'x'"),
        MetricsRequest(),
        MetricsReply(service: "nh-registry", samples: [#"nh_requests_total{type="health"}"#: 3]),
        Ack(),
        HubCreate(name: "news"),
        hub,
        HubGet(name: "news"),
        HubListRequest(),
        HubList(hubs: [
            HubSummary(name: "hub", createdAt: nil, isDefault: true, installations: 3),
            HubSummary(name: "news", createdAt: instant, isDefault: false, installations: 0),
        ]),
        HubDelete(name: "news"),
        HubPolicyPut(hub: "news", name: "Backend", rights: ["Send"]),
        policy,
        HubPolicyDelete(hub: "news", name: "Backend"),
        HubKeysRegenerate(hub: "news", name: "Backend", policyKey: "PrimaryKey"),
        HubLimitsPut(hub: "news", limits: HubLimits(installations: 1_000)),
        HubCatalogRequest(after: 4),
        HubCatalog(version: 5, hubs: [hub]),
        InstallationUpsert(installation: installation),
        InstallationPatch(
            installationId: "inst-1",
            operations: [
                PatchOperation(op: "add", path: "/tags", value: .string("Politics")),
                PatchOperation(op: "remove", path: "/tags/World"),
                PatchOperation(
                    op: "replace", path: "/templates/news",
                    value: .object(["body": .string("{}"), "tags": .array([.string("a")]), "n": .number(1.5)])),
            ]),
        InstallationGet(installationId: "inst-1"),
        InstallationByEndpoint(endpoint: "mD0xSRM4Z0h4tZbzk8ZK1UXa4E4SBWhk7vIpc5I8FBE"),
        InstallationDelete(installationId: "inst-1"),
        InstallationReply(installation: installation),
        InstallationList(tag: "World", limit: 50, after: "inst-0"),
        InstallationPage(installations: [installation], next: "inst-1"),
        RegistrySnapshotRequest(),
        JobCreate(type: .importUpsert, importFile: "/srv/import/devices.jsonl", outputDirectory: "/srv/import/out"),
        JobGet(jobId: "01a24cd9-9c57-7277-95fc-62dfab68bb2e"),
        JobList(),
        job,
        HubJobs(jobs: [job]),
        RegistrySnapshot(sequence: 12, installations: [installation]),
        InstallationChanged(change: .upserted, installationId: "inst-1", installation: installation),
        sendOfHub,
        SendAccepted(notificationId: "n-1", state: .enqueued),
        OutcomeRequest(notificationId: "n-1"),
        TestResultsRequest(notificationId: "n-1"),
        TestResults(results: [
            TestResult(installationId: "inst-1", platform: "apns", pushChannel: "AABB", outcome: "PnsUnavailable: no path"),
            TestResult(installationId: "inst-2", platform: "linux", pushChannel: "key", outcome: nil),
        ]),
        CancelScheduledNotification(notificationId: "n-1"),
        NotificationOutcome(
            notificationId: "n-1", state: .completed, enqueuedAt: instant, startedAt: instant, endedAt: later,
            targets: 3, delivered: 3, acknowledged: 2, expired: 0, failed: 1),
        PostUserNotification(
            userId: "alice", appNotificationId: "app-1", visual: VisualContent(title: "Hi", body: "There"),
            raw: "r", encrypted: "ZW5jcnlwdGVk", keyId: "a2V5LWlk", priority: "high", group: "chat", expiresAt: later),
        UserNotificationReply(notification: userNotification),
        UserChangesRequest(cursor: 7, limit: 100),
        UserChanges(
            changes: [
                UserNotificationChange(kind: .updated, sequence: 8, id: "un-1", notification: userNotification),
                UserNotificationChange(kind: .deleted, sequence: 9, id: "un-2"),
            ], cursor: 9, hasMore: false),
        UpdateUserNotificationState(id: "un-1", readState: .read, userActionState: .dismissed, device: "inst-1"),
        DeleteUserNotification(id: "un-1", device: "inst-1"),
        UserHistoryRequest(),
        UserHistory(notifications: [userNotification], cursor: 9),
        IssueUserCredential(userId: "alice", lifetime: 86_400),
        UserCredential(userId: "alice", credential: "nhu1.e30.c2ln", expiresAt: later),
        UserTokenRequest(credential: "nhu1.e30.c2ln"),
        UserToken(userId: "alice", token: "nhu1.e30.c2ln", expiresAt: later),
        UserKeyRequest(userId: "alice", device: "laptop"),
        UserKey(
            userId: "alice", keyId: "a2V5LWlkLTEyYnl0", p256dh: "BPoint", auth: "YXV0aA", refusePlaintext: true, createdAt: later,
            devices: [UserKeyDevice(device: "laptop", publicKey: "BDevice", name: "Laptop")], devicesSignature: "c2lnbmF0dXJl",
            recovery: UserKeyRecovery(publicKey: "BRecovery", auth: "YXV0aA", record: "cmVjb3Jk"), envelope: "ZW52ZWxvcGU"),
        PutUserKey(
            p256dh: "BPoint", auth: "YXV0aA", replaces: "b2xkLWtleS1pZA", refusePlaintext: false,
            devices: [UserKeyDevice(device: "laptop", publicKey: "BDevice", name: "Laptop")], devicesSignature: "c2lnbmF0dXJl",
            envelopes: ["phone": "ZW52ZWxvcGU"], recovery: UserKeyRecovery(publicKey: "BRecovery", auth: "YXV0aA", record: "cmVjb3Jk")),
        UserPairingRequest(
            step: .reveal, code: "1234-5678", commitment: "Y29tbWl0", publicKey: "BEphemeral",
            device: UserKeyDevice(device: "phone", publicKey: "BDevice", name: "Phone"), sealed: "c2VhbGVk"),
        UserPairing(
            code: "1234-5678", expiresAt: later, commitment: "Y29tbWl0", answerKey: "BAnswer", revealKey: "BReveal",
            device: UserKeyDevice(device: "phone", publicKey: "BDevice", name: "Phone"), sealed: "c2VhbGVk"),
        AgentSignal(userId: "alice", sequence: 9),
        AgentUserAction(id: "un-1", action: .dismiss),
        AgentAppsRequest(),
        AgentApps(apps: [
            AgentApp(service: "org.example.Chat", description: "alice@chat.example", endpoint: "https://hub.example/up/inst-1/c2VjcmV0",
                     connector: "2", waiting: 1, vapid: true)
        ]),
        AgentAppRemove(app: "org.example.Chat"),
        UserNotificationsChanged(userId: "alice", sequence: 9, origin: "inst-1"),
        PendingNotificationsRequest(after: 4, limit: 100),
        PendingNotifications(
            notifications: [
                AcceptedNotification(
                    sequence: 5, notificationId: "n-5",
                    send: SendNotification(format: .native, body: #"{"message":"hi"}"#, tagExpression: "World", timeToLive: 60),
                    enqueuedAt: instant, expiresAt: later)
            ], latest: 5),
        AgentHello(installationId: "inst-1"),
        AgentWelcome(installationId: "inst-1", pending: 2),
        AgentDelivery(
            deliveryId: "n-5/inst-1/news", notificationId: "n-5", installationId: "inst-1", template: "news",
            payload: #"{"aps":{"alert":"hi"}}"#, expiresAt: later,
            rich: RichReference(richId: "0390", richType: "image", message: "New photo", contentType: "image/png", size: 3, keyId: "a2V5LWlk"),
            richTicket: "nhu1.e30.c2ln"),
        AgentAck(deliveryIds: ["n-5/inst-1/news"], failures: [DeliveryFailure(deliveryId: "n-6/inst-1/native", reason: "fetch failed")]),
        SendRichNotification(
            idempotencyKey: "r-1", message: "New photo", richType: "image", contentType: "image/png", payload: Data([1, 2, 3]),
            sha256: "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81", userId: "alice", timeToLive: 600, keyId: "a2V5LWlk"),
        RichAccepted(notificationId: "n-7", richId: "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81"),
        RichFetchRequest(richId: "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81", ticket: "nhu1.e30.c2ln"),
        RichPayload(
            richId: "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81", contentType: "image/png",
            data: Data([1, 2, 3]), expiresAt: later),
        AgentCategoriesChanged(categories: ["World", "Sports"]),
    ]
}
