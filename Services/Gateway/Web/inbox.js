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
    await E2E.load();
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

  // End-to-end encryption: the user's keyring, held by this browser once paired, in its local
  // storage; records opened with WebCrypto (ECDH P-256, HKDF, AES-GCM) as RFC 8291 writes them.
  const E2E = (() => {
    const utf8 = (text) => new TextEncoder().encode(text);
    const concat = (...parts) => {
      const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
      let at = 0;
      for (const part of parts) { out.set(part, at); at += part.length; }
      return out;
    };
    const b64u = {
      enc: (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""),
      dec: (text) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4)), (c) => c.charCodeAt(0)),
    };
    const subtle = () => {
      if (!window.crypto || !crypto.subtle) throw new Error("this page is not a secure context (HTTPS or localhost): WebCrypto is not there");
      return crypto.subtle;
    };
    const sha256 = async (bytes) => new Uint8Array(await subtle().digest("SHA-256", bytes));
    async function hkdf(salt, ikm, info, length) {
      const key = await subtle().importKey("raw", ikm, "HKDF", false, ["deriveBits"]);
      return new Uint8Array(await subtle().deriveBits({ name: "HKDF", hash: "SHA-256", salt, info }, key, length * 8));
    }
    const curve = { name: "ECDH", namedCurve: "P-256" };
    const publicKey = (point) => subtle().importKey("raw", point, curve, false, []);
    // A P-256 private key from its 32-byte scalar alone, as PKCS#8 without the public point (which
    // WebCrypto computes): the keyring keeps scalars.
    const pkcs8 = (scalar) => concat(Uint8Array.from([0x30, 0x41, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce,
      0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x27, 0x30, 0x25, 0x02, 0x01, 0x01, 0x04, 0x20]),
      b64u.dec(scalar));
    const privateKey = (scalar) => subtle().importKey("pkcs8", pkcs8(scalar), curve, false, ["deriveBits"]);
    const signingKey = (scalar) => subtle().importKey("pkcs8", pkcs8(scalar), { name: "ECDSA", namedCurve: "P-256" }, false, ["sign"]);
    const ecdh = async (own, peerPoint) => new Uint8Array(await subtle().deriveBits({ name: "ECDH", public: await publicKey(peerPoint) }, own, 256));
    const keyId = async (point) => b64u.enc((await sha256(b64u.dec(point))).slice(0, 12));

    let keyring = null, storageName = null;
    const opened = new Map(), failed = new Map();

    async function load() {
      const user = $("who").textContent.replace(/^signed in as /, "");
      storageName = `nh-inbox-keyring:${Hub.hub}:${user}`;
      keyring = JSON.parse(localStorage.getItem(storageName) || "null");
      opened.clear();
      failed.clear();
      show($("accept-form"), keyring !== null);
      $("key-state").textContent = keyring ? `this browser holds the key ${await keyId(keyring.keys[keyring.keys.length - 1].p256dh)}` : "this browser holds no key";
    }

    /** The content key and nonce of RFC 8291 (§3.4) and RFC 8188 (§2.2). */
    async function contentKeys(shared, auth, receiverPoint, senderPoint, salt, usage) {
      const ikm = await hkdf(auth, shared, concat(utf8("WebPush: info\0"), receiverPoint, senderPoint), 32);
      const cek = await subtle().importKey("raw", await hkdf(salt, ikm, utf8("Content-Encoding: aes128gcm\0"), 16), "AES-GCM", false, [usage]);
      return { cek, nonce: await hkdf(salt, ikm, utf8("Content-Encoding: nonce\0"), 12) };
    }

    /** The plaintext bytes of one aes128gcm record (RFC 8188) for a receiver's private key (RFC 8291). */
    async function openRecord(record, own, ownPoint, auth) {
      const bytes = b64u.dec(record);
      const salt = bytes.slice(0, 16), idLength = bytes[20], sender = bytes.slice(21, 21 + idLength), sealed = bytes.slice(21 + idLength);
      const { cek, nonce } = await contentKeys(await ecdh(own, sender), auth, ownPoint, sender, salt, "decrypt");
      const padded = new Uint8Array(await subtle().decrypt({ name: "AES-GCM", iv: nonce }, cek, sealed));
      let end = padded.length;
      while (end > 0 && padded[end - 1] === 0) end--;
      if (padded[end - 1] !== 2) throw new Error("the record does not end with the last-record delimiter");
      return padded.slice(0, end - 1);
    }

    /** One aes128gcm record of `plaintext` for a receiver's public point and auth secret (RFC 8291). */
    async function sealRecord(plaintext, point, auth) {
      const sender = await subtle().generateKey(curve, true, ["deriveBits"]);
      const senderPoint = new Uint8Array(await subtle().exportKey("raw", sender.publicKey));
      const salt = crypto.getRandomValues(new Uint8Array(16));
      const { cek, nonce } = await contentKeys(await ecdh(sender.privateKey, point), auth, point, senderPoint, salt, "encrypt");
      const sealed = new Uint8Array(await subtle().encrypt({ name: "AES-GCM", iv: nonce }, cek, concat(plaintext, Uint8Array.of(2))));
      const size = sealed.length + 86;
      return b64u.enc(concat(salt, Uint8Array.of(size >>> 24, (size >>> 16) & 255, (size >>> 8) & 255, size & 255, 65), senderPoint, sealed));
    }

    /** A notification's content, opened with the keyring's key `id` (each in turn without one). */
    async function open(record, id) {
      if (id && !(await Promise.all(keyring.keys.map((k) => keyId(k.p256dh)))).includes(id)) await takeRotation();
      for (const key of [...keyring.keys].reverse()) {
        if (id && await keyId(key.p256dh) !== id) continue;
        const plain = await openRecord(record, await privateKey(key.privateKey), b64u.dec(key.p256dh), b64u.dec(key.auth));
        return JSON.parse(new TextDecoder().decode(plain));
      }
      throw new Error(`encrypted for key ${id}, which this browser does not hold: pair it again`);
    }

    /** The keyring a rotation sealed for this browser's device key, merged with the one held. */
    let rotation = null;
    function takeRotation() {
      rotation = rotation || (async () => {
        const me = JSON.parse(localStorage.getItem("nh-inbox-device") || "null");
        if (!me) return;
        const key = await (await api("GET", `users/me/key?device=${encodeURIComponent(me.device)}`)).json();
        if (!key.envelope) throw new Error(`the user's key is now ${key.keyId}, and none of it was left for this browser: pair it again`);
        const own = await subtle().importKey("jwk", me.privateKey, curve, false, ["deriveBits"]);
        const point = b64u.dec(me.publicKey);
        const auth = (await sha256(concat(utf8("nh-device-auth"), point))).slice(0, 16);
        const newer = JSON.parse(new TextDecoder().decode(await openRecord(key.envelope, own, point, auth)));
        const known = new Set(newer.keys.map((k) => k.p256dh));
        const current = newer.keys[newer.keys.length - 1];
        newer.keys = [...keyring.keys.filter((k) => !known.has(k.p256dh)), ...newer.keys.filter((k) => k !== current)]
          .sort((a, b) => new Date(a.createdAt) - new Date(b.createdAt)).concat([current]);
        localStorage.setItem(storageName, JSON.stringify(newer));
        await load();
      })().finally(() => { rotation = null; });
      return rotation;
    }

    /** The notification with its content opened, when it is; opening starts in the background. */
    function readable(notification) {
      if (!notification.encrypted || !keyring) return notification;
      const content = opened.get(notification.id);
      if (content && content.record === notification.encrypted) return { ...notification, visual: content.visual, raw: content.raw };
      if (!failed.has(notification.id) && !(content && content.pending)) {
        opened.set(notification.id, { pending: true });
        open(notification.encrypted, notification.keyId).then((plain) => {
          opened.set(notification.id, { record: notification.encrypted, visual: plain.visual, raw: plain.raw });
          render();
        }, (error) => {
          opened.delete(notification.id);
          failed.set(notification.id, error.message);
          render();
        });
      }
      return notification;
    }

    const placeholder = (notification) => failed.get(notification.id)
      ? `(encrypted: ${failed.get(notification.id)})` : keyring ? "(encrypted: opening…)" : "(encrypted: this browser does not hold the key; pair it below)";

    /** This browser as a device: its id and P-256 key, made once. */
    async function device() {
      let stored = JSON.parse(localStorage.getItem("nh-inbox-device") || "null");
      if (!stored) {
        const pair = await subtle().generateKey(curve, true, ["deriveBits"]);
        const id = b64u.enc(crypto.getRandomValues(new Uint8Array(6)));
        stored = { device: `browser-${id.replace(/[^A-Za-z0-9]/g, "x")}`, name: "browser",
                   publicKey: b64u.enc(new Uint8Array(await subtle().exportKey("raw", pair.publicKey))),
                   privateKey: await subtle().exportKey("jwk", pair.privateKey) };
        localStorage.setItem("nh-inbox-device", JSON.stringify(stored));
      }
      return { device: stored.device, publicKey: stored.publicKey, name: stored.name };
    }

    const step = async (body) => (await api("POST", "users/me/pairing", {
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    })).json();
    async function waitFor(code, expiresAt, done) {
      while (Date.now() < new Date(expiresAt).getTime()) {
        const pairing = await step({ step: "get", code });
        if (done(pairing)) return pairing;
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
      throw new Error(`pairing ${code} expired`);
    }

    /** Pairs this browser as a new device: the code shown, the other device's answer, the
        confirmation compared by the person, and the keyring sealed for this pairing alone. */
    async function pair() {
      const status = (text) => { $("pair-status").textContent = text; };
      show($("pair-ask"), false);
      const ephemeral = await subtle().generateKey(curve, true, ["deriveBits"]);
      const ownPoint = new Uint8Array(await subtle().exportKey("raw", ephemeral.publicKey));
      const opened = await step({ step: "open", commitment: b64u.enc(await sha256(ownPoint)) });
      $("pair-code").textContent = opened.code;
      show($("pair-panel"), true);
      status(`On a device that holds the key, run: nh-agent pair accept ${opened.code}`);
      const answered = await waitFor(opened.code, opened.expiresAt, (p) => p.answerKey);
      const me = await device();
      await step({ step: "reveal", code: opened.code, publicKey: b64u.enc(ownPoint), device: me });
      const answer = b64u.dec(answered.answerKey);
      const transcript = concat(utf8("nh-pairing-1"), answer, ownPoint, utf8(`${me.device} ${me.publicKey}`));
      const { confirmation, sealBits } = await derive(await ecdh(ephemeral.privateKey, answer), transcript);
      status("Compare the confirmation with the other device's.");
      const same = await ask(confirmation);
      if (!same) { status("Pairing abandoned: nothing was taken."); return; }
      status("Waiting for the other device to send the key…");
      const delivered = await waitFor(opened.code, opened.expiresAt, (p) => p.sealed);
      const sealKey = await subtle().importKey("raw", sealBits, "AES-GCM", false, ["decrypt"]);
      const sealed = b64u.dec(delivered.sealed);
      let plain;
      try {
        plain = await subtle().decrypt({ name: "AES-GCM", iv: sealed.slice(0, 12) }, sealKey, sealed.slice(12));
      } catch (error) {
        status("The key that came does not open with this pairing's secret: the exchange was changed on the way; nothing was kept.");
        return;
      }
      localStorage.setItem(storageName, new TextDecoder().decode(plain));
      await load();
      status(`Paired: ${$("key-state").textContent}.`);
      render();
    }

    /** The confirmation both sides derive, and the key that seals the keyring: as the agent's `Pairing.derive`. */
    async function derive(shared, transcript) {
      const digits = await hkdf(transcript, shared, utf8("confirmation"), 4);
      const number = String(((digits[0] * 16777216) + (digits[1] << 16) + (digits[2] << 8) + digits[3]) % 1000000).padStart(6, "0");
      return { confirmation: `${number.slice(0, 3)} ${number.slice(3)}`, sealBits: await hkdf(transcript, shared, utf8("seal"), 16) };
    }

    /** Shows the confirmation and waits for the person's answer. */
    function ask(confirmation) {
      $("pair-confirmation").textContent = confirmation;
      show($("pair-panel"), true);
      show($("pair-ask"), true);
      return new Promise((resolve) => {
        $("pair-yes").onclick = () => { show($("pair-ask"), false); resolve(true); };
        $("pair-no").onclick = () => { show($("pair-ask"), false); resolve(false); };
      });
    }

    /** This browser, holding the keyring, hands it to the new device that shows `code`; then
        sets the hub's record: the same key, the device list with the new device, signed, and the
        keyring sealed for the recovery key again. */
    async function accept(code) {
      const status = (text) => { $("pair-status").textContent = text; };
      const ephemeral = await subtle().generateKey(curve, true, ["deriveBits"]);
      const ownPoint = new Uint8Array(await subtle().exportKey("raw", ephemeral.publicKey));
      const pairing = await step({ step: "answer", code, publicKey: b64u.enc(ownPoint) });
      $("pair-code").textContent = code;
      show($("pair-panel"), true);
      status("Answered. Waiting for the new device…");
      const revealed = await waitFor(code, pairing.expiresAt, (p) => p.revealKey);
      const reveal = b64u.dec(revealed.revealKey), device = revealed.device;
      if (b64u.enc(await sha256(reveal)) !== pairing.commitment) {
        status("Pairing refused: the new device's key is not the one it opened the pairing with; the exchange was changed on the way. Nothing was sent.");
        return;
      }
      const transcript = concat(utf8("nh-pairing-1"), ownPoint, reveal, utf8(`${device.device} ${device.publicKey}`));
      const { confirmation, sealBits } = await derive(await ecdh(ephemeral.privateKey, reveal), transcript);
      status("Compare the confirmation with the new device's.");
      if (!await ask(confirmation)) { status("Pairing abandoned: nothing was sent."); return; }
      keyring.devices = keyring.devices.filter((d) => d.device !== device.device).concat([device]);
      const sealKey = await subtle().importKey("raw", sealBits, "AES-GCM", false, ["encrypt"]);
      const nonce = crypto.getRandomValues(new Uint8Array(12));
      const plain = utf8(JSON.stringify(keyring));
      const sealed = new Uint8Array(await subtle().encrypt({ name: "AES-GCM", iv: nonce }, sealKey, plain));
      await step({ step: "deliver", code, sealed: b64u.enc(concat(nonce, sealed)) });
      localStorage.setItem(storageName, JSON.stringify(keyring));
      const held = await (await api("GET", "users/me/key")).json();
      const current = keyring.keys[keyring.keys.length - 1];
      const lines = keyring.devices.map((d) => `${d.device} ${d.publicKey}`).sort();
      const message = utf8(["nh-user-devices-1", await keyId(current.p256dh), ...lines].join("\n"));
      const signature = new Uint8Array(await subtle().sign({ name: "ECDSA", hash: "SHA-256" }, await signingKey(keyring.signingKey), message));
      const recovery = { publicKey: keyring.recoveryPublicKey, auth: keyring.recoveryAuth,
                         record: await sealRecord(plain, b64u.dec(keyring.recoveryPublicKey), b64u.dec(keyring.recoveryAuth)) };
      await api("PUT", "users/me/key", { headers: { "Content-Type": "application/json" }, body: JSON.stringify({
        p256dh: current.p256dh, auth: current.auth, replaces: held.keyId, refusePlaintext: held.refusePlaintext,
        devices: keyring.devices, devicesSignature: b64u.enc(signature), recovery }) });
      status(`Sent the key to ${device.name || device.device} (${device.device}).`);
    }

    return { load, readable, placeholder, pair, accept, holds: () => keyring !== null };
  })();

  $("accept-form").addEventListener("submit", (event) => {
    event.preventDefault();
    E2E.accept($("accept-code").value.trim()).catch((error) => {
      $("pair-status").textContent = error instanceof Hub.HubError ? `${error.status} ${error.code}: ${error.message}` : error.message;
    });
  });

  $("pair-button").addEventListener("click", () => E2E.pair().catch((error) => {
    $("pair-status").textContent = error instanceof Hub.HubError ? `${error.status} ${error.code}: ${error.message}` : error.message;
  }));

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
    notification = E2E.readable(notification);
    const classes = [notification.readState, notification.userActionState].join(" ");
    const title = notification.visual ? notification.visual.title : notification.appNotificationId;
    const body = notification.visual ? notification.visual.body
        : notification.encrypted ? E2E.placeholder(notification) : (notification.raw || "");
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
