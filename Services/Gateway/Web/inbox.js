// The user inbox: the user's notifications, their states, and a live stream of every change made
// on any of the user's devices.
"use strict";

(() => {
  const { element: el, show } = Hub;
  const $ = (id) => document.getElementById(id);
  const notifications = new Map();
  let credential = null, token = null, cursor = 0, streamAbort = null, renewTimer = null, streamGeneration = 0;

  async function trade() {
    const response = await Hub.call("POST", "users/tokens", {
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ credential }),
    });
    const issued = await response.json();
    token = issued.token;
    $("who").textContent = `signed in as ${issued.userId}`;
    // Renewed at half its life: well before it runs out, and a short-lived token (userTokenLifetime)
    // is not asked for again every few seconds.
    const left = new Date(issued.expiresAt).getTime() - Date.now();
    clearTimeout(renewTimer);
    renewTimer = setTimeout(() => trade().catch(() => {}), Math.max(left / 2, 1000));
    return issued;
  }

  async function api(method, path, options = {}) {
    try {
      return await Hub.call(method, path, { ...options, authorization: `Bearer ${token}` });
    } catch (error) {
      if (!(error instanceof Hub.HubError && error.status === 401)) throw error;
      await trade();
      return Hub.call(method, path, { ...options, authorization: `Bearer ${token}` });
    }
  }

  // A credential is of one hub's user, and names the hub: the page works on it.
  async function signIn(text) {
    credential = text.trim();
    Hub.use(Hub.hubOfUserToken(credential) || Hub.defaultHub);
    try {
      await trade();
    } catch (error) {
      credential = null;
      throw error;
    }
    sessionStorage.setItem("nh-inbox-credential", credential);
    show($("signin"), false);
    show($("app"), true);
    show($("signout"), true);
    await reload();
  }

  /** The whole history, then the stream from the cursor it stands at. */
  async function reload() {
    const history = await (await api("GET", "users/me/notifications/history")).json();
    notifications.clear();
    for (const notification of history.notifications) notifications.set(notification.id, notification);
    cursor = history.cursor;
    render();
    listen();
  }

  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    show($("signin-error"), false);
    try {
      await signIn($("credential").value);
    } catch (error) {
      $("signin-error").textContent = error instanceof Hub.HubError ? `${error.status} ${error.code}: ${error.message}` : error.message;
      show($("signin-error"), true);
    }
  });

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem("nh-inbox-credential");
    location.reload();
  });

  // The live stream: server-sent events read with fetch, so the token travels in a header. Each
  // event's id is the cursor; a dropped stream comes back from the last one and misses nothing.
  function setLive(on, text) {
    $("live").textContent = text;
    $("live").className = `live ${on ? "on" : "off"}`;
  }

  async function listen() {
    if (streamAbort) streamAbort.abort();
    const generation = ++streamGeneration;
    const abort = new AbortController();
    streamAbort = abort;
    let retry = 1000;
    while (generation === streamGeneration) {
      try {
        const url = new URL(`${Hub.base}/users/me/notifications/stream`);
        url.searchParams.set("cursor", String(cursor));
        const response = await fetch(url, { headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" }, signal: abort.signal, cache: "no-store" });
        if (response.status === 401) { await trade(); continue; }
        if (response.status === 410 || response.status === 400) { await reload(); return; }
        if (!response.ok) throw new Error(`stream answered ${response.status}`);
        setLive(true, "live");
        retry = 1000;
        const outcome = await readEvents(response.body.getReader(), generation);
        if (outcome === "expired-token") await trade();
        if (outcome === "reload") { await reload(); return; }
      } catch (error) {
        if (abort.signal.aborted) return;
      }
      if (generation !== streamGeneration) return;
      setLive(false, "reconnecting…");
      await new Promise((resolve) => setTimeout(resolve, retry));
      retry = Math.min(retry * 2, 15000);
    }
  }

  async function readEvents(reader, generation) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || generation !== streamGeneration) return "closed";
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = { name: "message", data: "", id: null };
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue;
          const at = line.indexOf(":");
          const field = at < 0 ? line : line.slice(0, at), text = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
          if (field === "event") event.name = text;
          else if (field === "data") event.data += text;
          else if (field === "id") event.id = text;
        }
        const result = apply(event);
        if (result) return result;
      }
    }
  }

  function apply(event) {
    if (event.name === "error") {
      const error = JSON.parse(event.data || "{}");
      if (error.code === "unauthorized") return "expired-token";
      if (["expired", "invalid_argument", "history_rewound"].includes(error.code)) return "reload";
      return "closed";
    }
    // The store failed over and lost changes this page had: the whole history again.
    if (event.name === "reset") return "reload";
    if (["created", "updated", "deleted"].includes(event.name)) {
      const change = JSON.parse(event.data);
      if (change.kind === "deleted") notifications.delete(change.id);
      else notifications.set(change.id, change.notification);
      render();
    }
    if (event.id !== null && event.id !== "") cursor = Number(event.id);
    return null;
  }

  // The list
  function render() {
    const showDismissed = $("show-dismissed").checked;
    const all = [...notifications.values()].filter((n) => new Date(n.expiresAt) > new Date());
    const visible = all.filter((n) => showDismissed || n.userActionState !== "dismissed")
      .sort((a, b) => new Date(b.createdAt) - new Date(a.createdAt));
    const unread = all.filter((n) => n.readState === "unread" && n.userActionState !== "dismissed").length;
    $("unread").textContent = String(unread);
    $("counts").textContent = `${all.length} notifications, ${unread} unread`;
    document.title = `${unread ? `(${unread}) ` : ""}Notifications · ${Hub.hub}`;
    $("list").replaceChildren(...visible.map(item));
    show($("empty"), visible.length === 0);
  }

  function item(notification) {
    const classes = [notification.readState, notification.userActionState].join(" ");
    const title = notification.visual ? notification.visual.title : notification.appNotificationId;
    const body = notification.visual ? notification.visual.body
        : notification.encrypted ? "(encrypted: this page does not hold the key to read it)" : (notification.raw || "");
    const action = (label, name, change) => el("button", {
      class: `plain small ${name}`, onclick: () => act(notification.id, change),
    }, label);
    return el("li", { class: classes, "data-id": notification.id, "data-read": notification.readState, "data-action": notification.userActionState },
      el("div", {},
        el("div", { class: "title" }, title),
        el("div", { class: notification.visual ? "" : "mono" }, body),
        el("div", { class: "meta" }, `${Hub.relativeTime(notification.createdAt)} · ${notification.priority}`
          + (notification.group ? ` · ${notification.group}` : "") + (notification.userActionState !== "noInteraction" ? ` · ${notification.userActionState}` : ""))),
      el("div", { class: "actions" },
        notification.readState === "unread" ? action("Read", "read", { readState: "read" }) : action("Unread", "unread", { readState: "unread" }),
        action("Activate", "activate", { userActionState: "activated", readState: "read" }),
        action("Snooze", "snooze", { userActionState: "snoozed" }),
        notification.userActionState === "dismissed" ? null : action("Dismiss", "dismiss", { userActionState: "dismissed" }),
        el("button", { class: "plain small delete", onclick: () => remove(notification.id) }, "Delete")));
  }

  function failure(error) {
    $("inbox-error").textContent = error instanceof Hub.HubError ? `${error.status} ${error.code}: ${error.message}` : error.message;
    show($("inbox-error"), true);
  }

  async function act(id, change) {
    show($("inbox-error"), false);
    try {
      const reply = await (await api("PATCH", `users/me/notifications/${encodeURIComponent(id)}`, {
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(change),
      })).json();
      notifications.set(id, reply.notification);
      render();
    } catch (error) {
      failure(error);
    }
  }

  async function remove(id) {
    show($("inbox-error"), false);
    try {
      await api("DELETE", `users/me/notifications/${encodeURIComponent(id)}`);
      notifications.delete(id);
      render();
    } catch (error) {
      failure(error);
    }
  }

  $("mark-all").addEventListener("click", async () => {
    const unread = [...notifications.values()].filter((n) => n.readState === "unread");
    for (let start = 0; start < unread.length; start += 8) {
      await Promise.all(unread.slice(start, start + 8).map((n) => act(n.id, { readState: "read" })));
    }
  });

  $("show-dismissed").addEventListener("change", render);
  setInterval(render, 30000);

  const saved = sessionStorage.getItem("nh-inbox-credential");
  if (saved) {
    $("credential").value = saved;
    signIn(saved).catch((error) => failure(error));
  }
})();
