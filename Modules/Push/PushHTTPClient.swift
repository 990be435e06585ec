import CCurl
import Dispatch
import DispatchCore
import Foundation
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
/// TLS where the server offers it, with many streams on each (`maxConnectionsPerHost`, usually 1).
/// Completions are called on the client's thread.
public final class PushHTTPClient: @unchecked Sendable {
    public struct Settings: Sendable {
        /// Connections to one host; HTTP/2 multiplexes requests over them.
        public var maxConnectionsPerHost = 1
        /// Requests in flight at once; more wait in the client's queue.
        public var maxInFlight = 1_000
        /// Milliseconds a request may take, connection included.
        public var timeoutMs = 30_000
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
    private final class Transfer {
        let completion: @Sendable (PushHTTPResponse) -> Void
        var headerList: UnsafeMutablePointer<curl_slist>?
        var headers: [String: String] = [:]
        var body = Data()
        init(completion: @escaping @Sendable (PushHTTPResponse) -> Void) { self.completion = completion }
    }

    public let settings: Settings
    private let multi: UnsafeMutableRawPointer
    private let pending = Mutex<(queue: [Submission], stopping: Bool)>(([], false))
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    private var idle: [UnsafeMutableRawPointer] = []
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    public init(settings: Settings = Settings()) {
        self.settings = settings
        PushHTTPClient.globalInit
        multi = curl_multi_init()!
        _ = nh_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = nh_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, settings.maxConnectionsPerHost)
        _ = nh_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 1_000)
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

    // MARK: The client's thread

    private func run() {
        // Requests beyond maxInFlight wait here, oldest first.
        var waiting = FIFO<Submission>()
        while true {
            let (taken, stopping) = pending.withLock { state in
                let taken = state.queue
                state.queue.removeAll(keepingCapacity: true)
                return (taken, state.stopping)
            }
            if stopping { break }
            waiting.append(contentsOf: taken)
            while transfers.count < settings.maxInFlight, let next = waiting.popFirst() { start(next) }
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            collect()
            if transfers.count < settings.maxInFlight, !waiting.isEmpty { continue }
            var ready: Int32 = 0
            curl_multi_poll(multi, nil, 0, 1_000, &ready)
        }
        for (easy, transfer) in transfers {
            curl_multi_remove_handle(multi, easy)
            finish(easy, transfer, PushHTTPResponse(status: 0, transportError: "the push client stopped"))
        }
        transfers.removeAll()
        for submission in waiting.removeAll() { submission.completion(PushHTTPResponse(status: 0, transportError: "the push client stopped")) }
        let late = pending.withLock { state in
            defer { state.queue.removeAll() }
            return state.queue
        }
        for submission in late { submission.completion(PushHTTPResponse(status: 0, transportError: "the push client stopped")) }
        for easy in idle { curl_easy_cleanup(easy) }
        idle.removeAll()
        finished.signal()
    }

    private func start(_ submission: Submission) {
        let easy = idle.popLast() ?? curl_easy_init()!
        let transfer = Transfer(completion: submission.completion)
        let request = submission.request
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
        transfers[easy] = transfer
        inFlightCount.add(1, ordering: .relaxed)
        curl_multi_add_handle(multi, easy)
    }

    private func collect() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = message.pointee.data.result
            curl_multi_remove_handle(multi, easy)
            guard let transfer = transfers.removeValue(forKey: easy) else { continue }
            var response: PushHTTPResponse
            if result == CURLE_OK {
                var status = 0
                var version = 0
                _ = nh_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
                _ = nh_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
                response = PushHTTPResponse(
                    status: status, headers: transfer.headers, body: transfer.body,
                    httpVersion: version == CURL_HTTP_VERSION_2_0 ? 2 : version == CURL_HTTP_VERSION_3 ? 3 : 1)
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
        transfer.completion(response)
    }
}
