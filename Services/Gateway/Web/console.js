// The operator console: health, metrics, installations, sending, and recent notifications.
"use strict";

(() => {
  const { element: el, show } = Hub;
  const $ = (id) => document.getElementById(id);
  // Where the page cannot sign, it says so before the key is typed: the gateway signs instead.
  if (!Hub.canSign) {
    show($("insecure"), true);
    show($("signin-hint"), false);
  }
  let credentials = null;
  let timers = [];

  // A token lasts an hour and is reused for five minutes, as SDKs reuse theirs, so the gateway
  // checks its signature once rather than on every poll.
  let signed = null;
  async function authorization() {
    if (!signed || signed.credentials !== credentials || Date.now() - signed.at > 300000) {
      signed = { credentials, at: Date.now(), token: await Hub.sasToken(credentials) };
    }
    return signed.token;
  }

  async function api(method, path, options = {}) {
    return Hub.call(method, path, { ...options, authorization: await authorization() });
  }

  function fail(node, error) {
    node.textContent = error instanceof Hub.HubError ? `${error.status} ${error.code}: ${error.message}` : String(error.message || error);
    show(node, true);
  }

  // Signing in: the connection string is checked by asking for health with a token it signs.
  // A hub's connection string names its hub (EntityPath); a namespace key reaches every hub, and
  // the page then offers them to pick from.
  async function signIn(text) {
    const parsed = Hub.parseConnectionString(text);
    const previous = credentials, previousHub = Hub.hub;
    credentials = parsed;
    if (parsed.entityPath) Hub.use(parsed.entityPath);
    try {
      await api("GET", "health");
    } catch (error) {
      credentials = previous;
      Hub.use(previousHub);
      throw error;
    }
    if (!parsed.entityPath) offerHubs(parsed);
    sessionStorage.setItem("nh-console-connection", text);
    $("who").textContent = `signed in as ${parsed.keyName}`;
    show($("signin"), false);
    show($("app"), true);
    show($("signout"), true);
    start();
  }

  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    show($("signin-error"), false);
    try {
      await signIn($("connection").value);
    } catch (error) {
      fail($("signin-error"), error);
    }
  });

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem("nh-console-connection");
    location.reload();
  });

  /** With a namespace key, a list of the namespace's hubs to work on; nothing with a hub's own key. */
  async function offerHubs(parsed) {
    let hubs;
    try {
      const token = await Hub.sasToken(parsed, 3600, `${location.origin}/`);
      const response = await fetch(`${location.origin}/$namespace/notificationHubs`, { headers: { Authorization: token }, cache: "no-store" });
      if (!response.ok) return;
      hubs = (await response.json()).value.map((item) => item.name);
    } catch {
      return;
    }
    const picker = $("hub-picker");
    picker.replaceChildren(...hubs.map((name) => el("option", { value: name, selected: name === Hub.hub }, name)));
    show(picker, true);
    picker.onchange = () => {
      Hub.use(picker.value);
      signed = null;
      refreshHealth();
      refreshMessages();
      refreshPushServices();
    };
  }

  function start() {
    refreshHealth();
    refreshMessages();
    sampleMetrics();
    refreshPushServices();
    timers.push(setInterval(refreshHealth, 5000), setInterval(refreshMessages, 5000), setInterval(sampleMetrics, 2000),
      setInterval(refreshPushServices, 30000));
  }

  // Push services: each one's platform, endpoint and what identifies its credentials, never a secret.
  async function refreshPushServices() {
    try {
      const { services } = await (await api("GET", "pns")).json();
      $("push-services").replaceChildren(...services.map((service) => el("tr", { "data-service": service.service },
        el("td", { class: "mono" }, service.service),
        el("td", { class: "mono" }, service.platform),
        el("td", { class: "mono" }, service.endpoint),
        el("td", { class: "hint" }, [
          ...Object.entries(service.settings || {}).sort(([a], [b]) => a.localeCompare(b)).map(([name, value]) => `${name} ${value}`),
          `(${service.source === "set" ? "set over REST or nhctl" : "from the configuration"})`,
        ].join(" · ")))));
      show($("push-none"), services.length === 0);
    } catch (error) {
      // A key without Manage rights may not read them: the section stays empty.
    }
  }

  // Health
  async function refreshHealth() {
    try {
      const health = await (await api("GET", "health")).json();
      const status = $("health-status");
      status.textContent = health.status;
      status.className = `pill ${health.status === "ok" ? "up" : "down"}`;
      $("health").replaceChildren(...health.services.map((service) => {
        // Gauges such as queue depths; running totals are in the metrics.
        const details = Object.entries(service.details || {})
          .filter(([name]) => !/(Total|Sequence)$/.test(name) && name !== "cursor")
          .map(([name, value]) => `${name} ${value}`).join(" · ");
        return el("tr", { "data-service": service.service },
          el("td", { class: "mono" }, service.service),
          el("td", { class: service.up ? "up" : "down" }, service.up ? `up${service.status !== "ok" ? ` (${service.status})` : ""}` : "down"),
          el("td", {}, service.up ? Hub.duration(service.uptimeSeconds) : "–"),
          el("td", { class: "hint" }, details));
      }));
    } catch (error) {
      $("health-status").textContent = error.message;
      $("health-status").className = "pill down";
    }
  }

  // Metrics: counters become rates between samples; the charts keep the last 90 samples (3 minutes).
  const series = { sends: [], deliveries: [], acks: [], agents: [] };
  let previous = null;

  function parseMetrics(text) {
    const samples = {};
    for (const line of text.split("\n")) {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/.exec(line.trim());
      if (!match) continue;
      const labels = {};
      for (const [, name, value] of (match[2] || "").matchAll(/([a-zA-Z_]+)="([^"]*)"/g)) labels[name] = value;
      (samples[match[1]] ||= []).push({ labels, value: Number(match[3]) });
    }
    return samples;
  }

  function sum(samples, name, filter = () => true) {
    return (samples[name] || []).filter((sample) => filter(sample.labels)).reduce((total, sample) => total + sample.value, 0);
  }

  async function sampleMetrics() {
    let samples;
    try {
      const response = await fetch("/metrics", { cache: "no-store" });
      samples = parseMetrics(await response.text());
    } catch {
      return;
    }
    const now = performance.now();
    const counters = {
      sends: sum(samples, "nh_requests_total", (l) => l.service === "nh-publish" && ["notification.send", "notification.send.rich", "user.post"].includes(l.type)),
      deliveries: sum(samples, "nh_sent_total", (l) => l.service === "nh-dispatch"),
      acks: sum(samples, "nh_acked_total", (l) => l.service === "nh-dispatch"),
    };
    if (previous) {
      const seconds = Math.max((now - previous.at) / 1000, 0.001);
      for (const name of ["sends", "deliveries", "acks"]) {
        push(name, Math.max(counters[name] - previous.counters[name], 0) / seconds);
      }
    }
    push("agents", sum(samples, "nh_agents", (l) => l.service === "nh-dispatch"));
    previous = { at: now, counters };
    for (const name of Object.keys(series)) draw(name);
  }

  function push(name, value) {
    series[name].push(value);
    if (series[name].length > 90) series[name].shift();
  }

  function draw(name) {
    const canvas = $(`chart-${name}`), points = series[name];
    const last = points.length ? points[points.length - 1] : null;
    $(`now-${name}`).textContent = last === null ? "–" : (last >= 100 ? Math.round(last).toLocaleString() : (Math.round(last * 10) / 10).toString());
    const context = canvas.getContext("2d");
    const { width, height } = canvas;
    context.clearRect(0, 0, width, height);
    const style = getComputedStyle(document.documentElement);
    context.strokeStyle = style.getPropertyValue("--line");
    context.beginPath();
    context.moveTo(0, height - 1);
    context.lineTo(width, height - 1);
    context.stroke();
    if (points.length === 0) return;
    // One column per sample, newest on the right.
    const top = Math.max(...points, 1) * 1.15, slot = width / 90;
    context.fillStyle = style.getPropertyValue("--accent");
    points.forEach((value, index) => {
      const h = Math.max((value / top) * (height - 34), value > 0 ? 3 : 0);
      context.fillRect(width - (points.length - index) * slot + 1, height - 1 - h, Math.max(slot - 2, 1), h);
    });
    context.fillStyle = style.getPropertyValue("--muted");
    context.font = "22px system-ui";
    context.fillText(`max ${Math.round(top / 1.15).toLocaleString()}`, 8, 24);
  }

  // Installations: an id is looked up directly, a tag lists its registrations (Atom) a page at a time.
  let searchNext = null;

  async function search(text, continuation) {
    show($("search-error"), false);
    show($("installation-detail"), false);
    const rows = [];
    searchNext = null;
    try {
      const direct = await api("GET", `installations/${encodeURIComponent(text)}`).then((r) => r.json(), () => null);
      if (direct) rows.push({ id: direct.installationId, tags: direct.tags || [], expires: direct.expirationTime });
      const response = await api("GET", `tags/${encodeURIComponent(text)}/registrations`, {
        query: { $top: "50" }, headers: continuation ? { "X-MS-ContinuationToken": continuation } : {},
      }).catch((error) => { if (!direct) throw error; return null; });
      if (response) {
        searchNext = response.headers.get("X-MS-ContinuationToken");
        const feed = new DOMParser().parseFromString(await response.text(), "application/xml");
        for (const entry of feed.getElementsByTagName("entry")) {
          const value = (name) => entry.getElementsByTagName(name)[0]?.textContent || "";
          if (rows.some((row) => row.id === value("RegistrationId"))) continue;
          rows.push({ id: value("RegistrationId"), tags: value("Tags").split(",").filter(Boolean), expires: value("ExpirationTime") });
        }
      }
    } catch (error) {
      fail($("search-error"), error);
    }
    $("installations").replaceChildren(...(rows.length ? rows.map((row) =>
      el("tr", { class: "clickable", "data-installation": row.id, onclick: () => openInstallation(row.id) },
        el("td", { class: "mono" }, row.id), el("td", {}, row.tags.join(", ")),
        el("td", { class: "hint" }, row.expires ? new Date(row.expires).toLocaleString() : "never")))
      : [el("tr", {}, el("td", { colspan: 3, class: "hint" }, "no installation has that tag or id"))]));
    $("search-more").replaceChildren(searchNext ? el("button", { class: "plain small", onclick: () => search(text, searchNext) }, "next page") : "");
    show($("search-more"), Boolean(searchNext));
  }

  async function openInstallation(id) {
    try {
      const installation = await (await api("GET", `installations/${encodeURIComponent(id)}`)).json();
      $("installation-detail").textContent = JSON.stringify(installation, null, 2);
      show($("installation-detail"), true);
    } catch (error) {
      fail($("search-error"), error);
    }
  }

  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("search").value.trim();
    if (text) search(text);
  });

  // Sending: the expression is checked as it is typed, by the same parser the publish service uses.
  let checkTimer = null, checkSeq = 0;

  $("send-tags").addEventListener("input", () => {
    clearTimeout(checkTimer);
    checkTimer = setTimeout(checkExpression, 200);
  });

  async function checkExpression() {
    const text = $("send-tags").value, seq = ++checkSeq, input = $("send-tags");
    show($("tags-caret"), false);
    if (!text.trim()) {
      input.classList.remove("invalid");
      $("tags-check").textContent = "every device";
      return true;
    }
    try {
      const result = await (await api("GET", "expressions/check", { query: { expression: text } })).json();
      if (seq !== checkSeq) return result.valid;
      input.classList.toggle("invalid", !result.valid);
      $("tags-check").className = result.valid ? "hint" : "error";
      $("tags-check").textContent = result.valid ? `✓ tags: ${result.tags.join(", ")}` : `${result.code}: ${result.message}`;
      if (!result.valid && typeof result.position === "number") {
        $("tags-caret").textContent = `${text}\n${" ".repeat(result.position)}^`;
        show($("tags-caret"), true);
      }
      return result.valid;
    } catch (error) {
      $("tags-check").className = "error";
      $("tags-check").textContent = error.message;
      return false;
    }
  }

  $("send-format").addEventListener("change", () => {
    const template = $("send-format").value === "template";
    show($("properties-field"), template);
    show($("body-field"), !template);
  });

  function properties() {
    const map = {};
    $("send-properties").value.split("\n").forEach((line, index) => {
      if (!line.trim()) return;
      const at = line.indexOf("=");
      const name = at < 0 ? "" : line.slice(0, at).trim();
      if (!name) throw new Error(`line ${index + 1} of the properties needs name=value, with a name`);
      map[name] = line.slice(at + 1);
    });
    return map;
  }

  $("send-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    show($("send-error"), false);
    const button = $("send-button");
    button.disabled = true;
    try {
      const format = $("send-format").value;
      const headers = { "ServiceBusNotification-Format": format, "Content-Type": format === "template" ? "application/json" : "application/octet-stream" };
      const tags = $("send-tags").value.trim();
      if (tags) headers["ServiceBusNotification-Tags"] = tags;
      const body = format === "template" ? JSON.stringify(properties()) : $("send-body").value;
      const response = await api("POST", "messages", { headers, body });
      const id = response.headers.get("TrackingId") || (response.headers.get("Location") || "").split("/").pop().split("?")[0];
      followOutcome(id);
      refreshMessages();
    } catch (error) {
      fail($("send-error"), error);
    } finally {
      button.disabled = false;
    }
  });

  const finalStates = new Set(["Completed", "NoTargetFound", "Abandoned", "Canceled"]);
  let following = 0;

  async function followOutcome(id) {
    const mine = ++following, path = [];
    $("outcome-id").textContent = id;
    show($("send-outcome"), true);
    for (let attempt = 0; attempt < 120 && mine === following; attempt++) {
      try {
        const outcome = await (await api("GET", `messages/${encodeURIComponent(id)}`, { headers: { Accept: "application/json" } })).json();
        if (path[path.length - 1] !== outcome.state) path.push(outcome.state);
        $("outcome-state").textContent = outcome.state;
        $("outcome-state").className = `state-${outcome.state}`;
        // The way it came, once there is more than the state shown beside it.
        $("outcome-path").textContent = path.length > 1 ? path.join(" → ") : "";
        const counts = Object.fromEntries((outcome.outcomeCounts || []).map((c) => [c.name, c.count]));
        $("outcome-counts").textContent = `targets ${counts.Targets ?? 0} · delivered ${counts.Delivered ?? 0} · acknowledged ${counts.Success ?? 0} · expired ${counts.Expired ?? 0} · failed ${counts.Failed ?? 0}`;
        if (finalStates.has(outcome.state) && (outcome.state !== "Completed" || (counts.Success ?? 0) >= (counts.Targets ?? 0))) break;
      } catch (error) {
        if (!(error instanceof Hub.HubError && error.status === 404)) $("outcome-path").textContent = error.message;
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }

  // Recent notifications
  async function refreshMessages() {
    try {
      const list = await (await api("GET", "messages", { query: { $top: "20" } })).json();
      $("messages").replaceChildren(...list.messages.map((message) => {
        const counts = Object.fromEntries((message.outcomeCounts || []).map((c) => [c.name, c.count]));
        const target = message.tags ? `tags ${message.tags}` : message.installationId ? `device ${message.installationId}`
          : message.userId ? `user ${message.userId}` : "everyone";
        return el("tr", { "data-notification": message.notificationId },
          el("td", { class: "mono id" }, message.notificationId),
          el("td", {}, `${message.format} · ${target}`),
          el("td", { class: `state-${message.state}` }, message.state),
          el("td", {}, `${counts.Targets ?? 0} / ${counts.Delivered ?? 0} / ${counts.Success ?? 0}`),
          el("td", { class: "hint" }, Hub.relativeTime(message.enqueueTime)));
      }));
    } catch (error) {
      $("messages").replaceChildren(el("tr", {}, el("td", { colspan: 5, class: "error" }, error.message)));
    }
  }

  const saved = sessionStorage.getItem("nh-console-connection");
  if (saved) {
    $("connection").value = saved;
    signIn(saved).catch((error) => fail($("signin-error"), error));
  }
})();
