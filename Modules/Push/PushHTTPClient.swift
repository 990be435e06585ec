import CCurl
import Dispatch
import DispatchCore
import Foundation
import HubProtocol
import Synchronization

/// One request to a push service.
public struct PushHTTPRequest: Sendable {
    public var url: String
    public var method = "POST"
    /// Header names as the service documents them; values as they go out.
    public var headers: [(String, String)]
    public var body: Data
    /// Makes the body, off the caller's thread, before the request goes out: for work such as
    /// encryption that would hold up the caller. What it throws ends the request unsent.
    public var makeBody: (@Sendable () throws(PushRequestError) -> Data)?

    public init(url: String, method: String = "POST", headers: [(String, String)], body: Data) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
    }

    /// Refuses a header whose name or value could not go out as one header line: a line break in
    /// a value passed on from a send or template would write another header, or another request,
    /// onto a connection that carries other deliveries and the hub's token. Registration and
    /// publish refuse such headers first (`Platform.checkHeaders`); this holds for what a store
    /// already holds.
    public func checkHeaders() throws(PushRequestError) {
        for (name, value) in headers {
            guard Platform.isHeaderName(name), Platform.isHeaderValue(value) else {
                throw PushRequestError(outcome: "PnsInterfaceError", reason: "header '\(name.prefix(64))' holds a control character; it is not sent")
            }
        }
    }
}

/// A push service's answer, or why there was none.
public struct PushHTTPResponse: Sendable {
    /// 0 when the request never got an answer (`transportError` says why).
    public var status: Int
    /// Header names in lower case.
    public var headers: [String: String]
    public var body: Data
    public var transportError: String?
    /// The request could not be made (its `makeBody` failed): nothing was sent.
    public var requestError: PushRequestError?
    /// The HTTP version the answer came over: 2 for HTTP/2.
    public var httpVersion: Int
    /// Where the request went, as it was sent.
    public var requestURL: String?

    public init(
        status: Int, headers: [String: String] = [:], body: Data = Data(), transportError: String? = nil,
        requestError: PushRequestError? = nil, httpVersion: Int = 2
    ) {
        self.requestError = requestError
        self.status = status
        self.headers = headers
        self.body = body
        self.transportError = transportError
        self.httpVersion = httpVersion
    }
}

/// An HTTP client for push services: libcurl's multi interface on a thread of its own, so that one
/// thread keeps many requests in flight. Requests to one host share its connections, HTTP/2 over
/// TLS where the server offers it, with many streams on each. Completions are called on the
/// client's thread.
///
/// A request is handed to libcurl only when one of its host's connections has a stream free for it
/// (`streamsPerConnection` on each of up to `maxConnectionsPerHost`; libcurl opens another
/// connection when those it has are full), so its timeout runs from when it goes out, never while
/// it waits its turn: a slow service gets a longer queue here, not requests sent twice. A host
/// whose connections give no answer to any request for `stallMs`, or a request that times out with
/// no answer from its host since it went out, has its connections shut down: their requests end
/// with a transport error (to be tried again) and the next go out on a new connection. (A timeout
/// alone ends only its stream, and libcurl would send the next requests on the same connection.)
public final class PushHTTPClient: @unchecked Sendable {
    public struct Settings: Sendable {
        /// Connections to one host; HTTP/2 multiplexes requests over them.
        public var maxConnectionsPerHost = 4
        /// Requests in flight on one connection: HTTP/2 streams, at most what the service allows
        /// (100 is the least RFC 9113 asks a server to allow).
        public var streamsPerConnection = 100
        /// Requests in flight at once; more wait in the client's queue.
        public var maxInFlight = 1_000
        /// Milliseconds a request may take from when it goes out, connection included.
        public var timeoutMs = 30_000
        /// Milliseconds with requests in flight to a host and no answer to any: its connections are
        /// taken as stuck, and closed.
        public var stallMs = 10_000
        /// PEM file of the certificate authorities to trust instead of the system's (for a private
        /// or test push service).
        public var caFile: String? = nil
        public init() {}
    }

    private struct Submission {
        var request: PushHTTPRequest
        var completion: @Sendable (PushHTTPResponse) -> Void
    }

    /// What libcurl fills in while a request runs; owned by the client's thread.
    fileprivate final class Transfer {
        let completion: @Sendable (PushHTTPResponse) -> Void
        let host: String
        /// Where the request goes, as its answer carries it back (`PushHTTPResponse.requestURL`).
        let url: String
        let book: SocketBook
        let startedAt: ContinuousClock.Instant
        var headerList: UnsafeMutablePointer<curl_slist>?
        var headers: [String: String] = [:]
        var body = Data()
        init(
            completion: @escaping @Sendable (PushHTTPResponse) -> Void, host: String, url: String, book: SocketBook, startedAt: ContinuousClock.Instant
        ) {
            self.completion = completion
            self.host = host
            self.url = url
            self.book = book
            self.startedAt = startedAt
        }
    }

    /// The sockets of the client's connections, by host, as libcurl makes and closes them: a host
    /// found stuck has every one of its connections shut down, those idle between requests too.
    /// Used on the client's thread only (libcurl calls back on it).
    fileprivate final class SocketBook {
        var hostOf: [curl_socket_t: String] = [:]
    }
    private let sockets = SocketBook()

    /// A host's requests: those waiting for a free stream, oldest first, how many are out, and when
    /// it last answered one.
    private struct Host {
        var waiting = FIFO<Submission>()
        var inFlight = 0
        var lastAnswer: ContinuousClock.Instant?
        /// Whether its connections carry many requests at once (HTTP/2), as its answers showed; nil
        /// before the first. A host that answers over HTTP/1.1 (WNS) takes one request per
        /// connection, so the rest wait here, their timeouts not yet running.
        var multiplexes: Bool?
    }

    public let settings: Settings
    private let multi: UnsafeMutableRawPointer
    private let pending = Mutex<(queue: [Submission], stopping: Bool)>(([], false))
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    private var hosts: [String: Host] = [:]
    private var waitingCount = 0
    private let clock = ContinuousClock()
    /// When `closeStalled` last looked.
    private var stallsCheckedAt = ContinuousClock.now
    private var idle: [UnsafeMutableRawPointer] = []
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    public init(settings: Settings = Settings()) {
        self.settings = settings
        PushHTTPClient.globalInit
        multi = curl_multi_init()!
        _ = nh_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = nh_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, settings.maxConnectionsPerHost)
        _ = nh_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, settings.streamsPerConnection)
        let thread = Thread { [unowned self] in self.run() }
        thread.name = "push-http"
        self.thread = thread
        thread.start()
    }

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    /// Bodies made off the caller's thread, on as many cores as there are.
    private static let bodies = DispatchQueue(label: "push-bodies", qos: .utility, attributes: .concurrent)

    /// Queues a request; `completion` runs on the client's thread when it ends, however it ends
    /// (on another when its body could not be made).
    public func send(_ request: PushHTTPRequest, completion: @escaping @Sendable (PushHTTPResponse) -> Void) {
        if let makeBody = request.makeBody {
            Self.bodies.async {
                var made = request
                made.makeBody = nil
                do {
                    made.body = try makeBody()
                } catch {
                    completion(PushHTTPResponse(
                        status: 0, requestError: error as? PushRequestError ?? PushRequestError(outcome: "PnsInterfaceError", reason: "\(error)")))
                    return
                }
                self.send(made, completion: completion)
            }
            return
        }
        let accepted = pending.withLock { state in
            guard !state.stopping else { return false }
            state.queue.append(Submission(request: request, completion: completion))
            return true
        }
        guard accepted else {
            completion(PushHTTPResponse(status: 0, transportError: "the push client has stopped"))
            return
        }
        curl_multi_wakeup(multi)
    }

    /// Ends the client: requests in flight end with a transport error.
    public func stop() {
        let first = pending.withLock { state in
            defer { state.stopping = true }
            return !state.stopping
        }
        guard first else { return }
        curl_multi_wakeup(multi)
        finished.wait()
    }

    deinit {
        stop()
        curl_multi_cleanup(multi)
    }

    /// Requests in flight now (read on any thread, approximately).
    public var inFlight: Int { inFlightCount.load(ordering: .relaxed) }
    private let inFlightCount = Atomic<Int>(0)
    /// How often connections were shut down as stuck (read on any thread).
    public var stalls: Int { stallCount.load(ordering: .relaxed) }
    private let stallCount = Atomic<Int>(0)

    /// The host (and port) a request goes to: its connections and streams are counted together.
    static func host(of url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host else { return url }
        return components.port.map { "\(host):\($0)" } ?? host
    }

    // MARK: The client's thread

    private func run() {
        while true {
            let (taken, stopping) = pending.withLock { state in
                let taken = state.queue
                state.queue.removeAll(keepingCapacity: true)
                return (taken, state.stopping)
            }
            if stopping { break }
            for submission in taken {
                hosts[Self.host(of: submission.request.url), default: Host()].waiting.append(submission)
            }
            waitingCount += taken.count
            startWaiting()
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            collect()
            closeStalled()
            if transfers.count < settings.maxInFlight, hasRoomForWaiting { continue }
            var ready: Int32 = 0
            curl_multi_poll(multi, nil, 0, 1_000, &ready)
        }
        for (easy, transfer) in transfers {
            curl_multi_remove_handle(multi, easy)
            finish(easy, transfer, PushHTTPResponse(status: 0, transportError: "the push client stopped"))
        }
        transfers.removeAll()
        for name in hosts.keys {
            for submission in hosts[name]!.waiting.removeAll() {
                submission.completion(PushHTTPResponse(status: 0, transportError: "the push client stopped"))
            }
        }
        let late = pending.withLock { state in
            defer { state.queue.removeAll() }
            return state.queue
        }
        for submission in late { submission.completion(PushHTTPResponse(status: 0, transportError: "the push client stopped")) }
        for easy in idle { curl_easy_cleanup(easy) }
        idle.removeAll()
        finished.signal()
    }

    /// A host's requests in flight at most: every stream of every connection it may have, or one a
    /// connection until it has answered over HTTP/2.
    private func perHost(_ host: Host) -> Int {
        settings.maxConnectionsPerHost * (host.multiplexes == true ? settings.streamsPerConnection : 1)
    }

    private var hasRoomForWaiting: Bool {
        waitingCount > 0 && hosts.values.contains { !$0.waiting.isEmpty && $0.inFlight < perHost($0) }
    }

    /// Hands waiting requests to libcurl, oldest first within each host, while their host has a
    /// stream free and the client is under `maxInFlight`.
    private func startWaiting() {
        guard waitingCount > 0 else { return }
        for name in Array(hosts.keys) where transfers.count < settings.maxInFlight {
            while transfers.count < settings.maxInFlight, hosts[name]!.inFlight < perHost(hosts[name]!), let next = hosts[name]!.waiting.popFirst() {
                waitingCount -= 1
                hosts[name]!.inFlight += 1
                start(next, host: name)
            }
        }
    }

    /// A host with requests out and no answer to any for `stallMs`: its connections are stuck (a
    /// service that stopped reading, a path that drops everything). Its requests end unanswered and
    /// their connections are closed, so that what is sent next opens a new one.
    private func closeStalled() {
        let now = clock.now
        let stall = Duration.milliseconds(settings.stallMs)
        // Looked at a tenth of `stallMs` apart (at most a second), not at every turn of the loop.
        guard now - stallsCheckedAt >= min(stall / 10, .seconds(1)) else { return }
        stallsCheckedAt = now
        var stalled: Set<String> = []
        for transfer in transfers.values where !stalled.contains(transfer.host) {
            let quietSince = max(transfer.startedAt, hosts[transfer.host]?.lastAnswer ?? transfer.startedAt)
            if now - quietSince > stall { stalled.insert(transfer.host) }
        }
        for host in stalled {
            stallCount.add(1, ordering: .relaxed)
            // Each connection the host's requests are on is shut down under libcurl, which then
            // sees it broken: it ends every request on it with an error (to be tried again) and
            // closes it, so that the next requests open a new one. Shutting the socket down, not
            // closing it, leaves the descriptor to libcurl.
            shutDownConnections(of: host)
            hosts[host]?.lastAnswer = now
        }
    }

    /// Shuts down the sockets of every connection to `host`, idle ones too: libcurl sees them
    /// broken, ends what is on them and closes them; the descriptors stay libcurl's to close.
    private func shutDownConnections(of host: String) {
        for (socket, owner) in sockets.hostOf where owner == host { _ = shutdown(socket, Int32(SHUT_RDWR)) }
    }

    private func start(_ submission: Submission, host: String) {
        let easy = idle.popLast() ?? curl_easy_init()!
        let request = submission.request
        let transfer = Transfer(completion: submission.completion, host: host, url: request.url, book: sockets, startedAt: clock.now)
        _ = nh_curl_easy_setopt_string(easy, CURLOPT_URL, request.url)
        _ = nh_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = nh_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS)
        // Wait for a connection that can multiplex rather than open another.
        _ = nh_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1)
        _ = nh_curl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "https")
        _ = nh_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, settings.timeoutMs)
        if let caFile = settings.caFile { _ = nh_curl_easy_setopt_string(easy, CURLOPT_CAINFO, caFile) }
        _ = nh_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method)
        if request.method == "POST" || !request.body.isEmpty {
            _ = nh_curl_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, request.body.count)
            request.body.withUnsafeBytes { bytes in
                _ = nh_curl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
            }
        }
        // No "Expect: 100-continue" round trip before a body.
        var list = curl_slist_append(nil, "Expect:")
        for (name, value) in request.headers { list = curl_slist_append(list, "\(name): \(value)") }
        transfer.headerList = list
        _ = nh_curl_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, list)
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        _ = nh_curl_easy_setopt_callback(easy, CURLOPT_WRITEFUNCTION) { data, size, count, context in
            let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
            if let data { transfer.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: size * count) }
            return size * count
        }
        _ = nh_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context)
        _ = nh_curl_easy_setopt_callback(easy, CURLOPT_HEADERFUNCTION) { data, size, count, context in
            let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
            guard let data else { return size * count }
            let line = String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)
            if line.hasPrefix("HTTP/") {
                // A new response (after a 100 or a redirect): its headers replace the last one's.
                transfer.headers.removeAll()
            } else if let colon = line.firstIndex(of: ":") {
                let name = line[..<colon].lowercased()
                let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
                transfer.headers[name] = value
            }
            return size * count
        }
        _ = nh_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context)
        let book = Unmanaged.passUnretained(sockets).toOpaque()
        // A connection made for this transfer is its host's.
        _ = nh_curl_easy_setopt_sockopt(easy) { context, socket, _ in
            let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
            transfer.book.hostOf[socket] = transfer.host
            return CURL_SOCKOPT_OK
        }
        _ = nh_curl_easy_setopt_pointer(easy, CURLOPT_SOCKOPTDATA, context)
        _ = nh_curl_easy_setopt_closesocket(easy) { book, socket in
            let sockets = Unmanaged<SocketBook>.fromOpaque(book!).takeUnretainedValue()
            sockets.hostOf[socket] = nil
            return close(socket)
        }
        _ = nh_curl_easy_setopt_pointer(easy, CURLOPT_CLOSESOCKETDATA, book)
        transfers[easy] = transfer
        inFlightCount.add(1, ordering: .relaxed)
        curl_multi_add_handle(multi, easy)
    }

    private func collect() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = message.pointee.data.result
            if result == CURLE_OPERATION_TIMEDOUT, let transfer = transfers[easy],
                (hosts[transfer.host]?.lastAnswer).map({ $0 < transfer.startedAt }) ?? true
            {
                // Timed out, and the host answered nothing since it went out: the connection is stuck.
                // libcurl would keep it (a timeout ends only the stream) and send the next requests
                // on it; shut it down, so that libcurl closes it and opens another.
                shutDownConnections(of: transfer.host)
                stallCount.add(1, ordering: .relaxed)
            }
            curl_multi_remove_handle(multi, easy)
            guard let transfer = transfers.removeValue(forKey: easy) else { continue }
            hosts[transfer.host]?.inFlight -= 1
            var response: PushHTTPResponse
            if result == CURLE_OK {
                var status = 0
                var version = 0
                _ = nh_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
                _ = nh_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
                response = PushHTTPResponse(
                    status: status, headers: transfer.headers, body: transfer.body,
                    httpVersion: version == CURL_HTTP_VERSION_2_0 ? 2 : version == CURL_HTTP_VERSION_3 ? 3 : 1)
                if status > 0 {
                    hosts[transfer.host]?.lastAnswer = clock.now
                    hosts[transfer.host]?.multiplexes = version == CURL_HTTP_VERSION_2_0 || version == CURL_HTTP_VERSION_3
                }
            } else {
                response = PushHTTPResponse(status: 0, transportError: String(cString: curl_easy_strerror(result)))
            }
            finish(easy, transfer, response)
        }
    }

    private func finish(_ easy: UnsafeMutableRawPointer, _ transfer: Transfer, _ response: PushHTTPResponse) {
        curl_slist_free_all(transfer.headerList)
        transfer.headerList = nil
        curl_easy_reset(easy)
        if idle.count < 256 { idle.append(easy) } else { curl_easy_cleanup(easy) }
        inFlightCount.subtract(1, ordering: .relaxed)
        var response = response
        response.requestURL = transfer.url
        transfer.completion(response)
    }
}
