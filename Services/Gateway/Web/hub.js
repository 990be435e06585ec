// Shared by the console and the inbox: signing, REST calls and small DOM helpers.
// Nothing here leaves the browser except the requests to this gateway.
"use strict";

const Hub = (() => {
  // The hub the page works on: ?hub=, else the gateway's default hub; a connection string's
  // EntityPath or a user credential's hub moves it there (`use`).
  let hub = new URLSearchParams(location.search).get("hub") || document.documentElement.dataset.hub;
  let base = `${location.origin}/${encodeURIComponent(hub)}`;
  const apiVersion = "2020-06";

  /** Works on hub `name` from now on, and says so in the page's hub pill and title. */
  function use(name) {
    const previous = hub;
    hub = name;
    base = `${location.origin}/${encodeURIComponent(hub)}`;
    for (const pill of document.querySelectorAll("[data-hub-name]")) pill.textContent = hub;
    document.title = document.title.replace(` · ${previous}`, ` · ${hub}`);
  }
  use(hub);

  /** Endpoint=sb://…/;SharedAccessKeyName=…;SharedAccessKey=… into its parts. */
  function parseConnectionString(text) {
    const fields = {};
    for (const part of text.trim().split(";")) {
      const at = part.indexOf("=");
      if (at > 0) fields[part.slice(0, at).trim().toLowerCase()] = part.slice(at + 1).trim();
    }
    const keyName = fields["sharedaccesskeyname"], key = fields["sharedaccesskey"];
    if (!keyName || !key) {
      throw new Error("a connection string needs SharedAccessKeyName=…;SharedAccessKey=… (from nhctl keys)");
    }
    return { keyName, key, endpoint: fields["endpoint"] || "", entityPath: fields["entitypath"] || "" };
  }

  function base64(bytes) {
    let text = "";
    for (const byte of new Uint8Array(bytes)) text += String.fromCharCode(byte);
    return btoa(text);
  }

  /** Whether this page can sign: WebCrypto is there only in a secure context (HTTPS, or this machine). */
  const canSign = Boolean(window.isSecureContext && window.crypto && window.crypto.subtle);

  /**
   * A SharedAccessSignature for every resource of this hub, signed here with WebCrypto's HMAC; where
   * the page cannot sign, made by the gateway from the key (POST /{hub}/signatures), for an hour.
   */
  async function sasToken(credentials, seconds = 3600, resourceURL = base) {
    if (!canSign) {
      let response;
      try {
        response = await call("POST", "signatures", {
          body: JSON.stringify({ keyName: credentials.keyName, key: credentials.key }),
          headers: { "Content-Type": "application/json" },
        });
      } catch (error) {
        if (error instanceof HubError) throw error;
        throw new Error(`this page cannot sign, and the gateway did not sign for it: ${error.message || error}`);
      }
      return (await response.json()).token;
    }
    const expiry = Math.floor(Date.now() / 1000) + seconds;
    const resource = encodeURIComponent(resourceURL.toLowerCase());
    const key = await crypto.subtle.importKey(
      "raw", new TextEncoder().encode(credentials.key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const signature = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${resource}\n${expiry}`));
    return `SharedAccessSignature sr=${resource}&sig=${encodeURIComponent(base64(signature))}&se=${expiry}&skn=${encodeURIComponent(credentials.keyName)}`;
  }

  /** An error the gateway answered: status, stable code and the message that says what to fix. */
  class HubError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** The gateway's errors are <Error><Code/><Detail>code: message</Detail></Error>. */
  async function failure(response) {
    const text = await response.text();
    const detail = /<Detail>([\s\S]*)<\/Detail>/.exec(text);
    const unescaped = (detail ? detail[1] : text).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&amp;/g, "&");
    const split = /^([a-z_]+): ([\s\S]*)$/.exec(unescaped);
    return new HubError(response.status, split ? split[1] : String(response.status), split ? split[2] : unescaped || response.statusText);
  }

  /** A request to /{hub}/path with an Authorization header; resolves to the response when it succeeds. */
  async function call(method, path, { authorization, body, headers = {}, query = {} } = {}) {
    const url = new URL(`${base}/${path}`);
    url.searchParams.set("api-version", apiVersion);
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
    const all = { ...headers };
    if (authorization) all["Authorization"] = authorization;
    const response = await fetch(url, { method, headers: all, body, cache: "no-store" });
    if (!response.ok) throw await failure(response);
    return response;
  }

  function element(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function show(node, visible) { node.hidden = !visible; }

  function relativeTime(date) {
    const seconds = Math.round((Date.now() - new Date(date).getTime()) / 1000);
    if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
    return new Date(date).toLocaleString();
  }

  function duration(seconds) {
    if (seconds < 60) return `${Math.round(seconds)} s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
    return `${Math.floor(seconds / 86400)} d ${Math.round((seconds % 86400) / 3600)} h`;
  }

  /**
   * The hub of a user credential or token (nhu1.<claims>.<signature>): its user is `hub/user` for a
   * hub other than the gateway's default (the hub's name, then `~N` after a re-creation); null for
   * the default hub, or text that is not one.
   */
  function hubOfUserToken(text) {
    const parts = text.trim().split(".");
    if (parts.length !== 3 || parts[0] !== "nhu1") return null;
    try {
      const claims = JSON.parse(atob(parts[1].replace(/-/g, "+").replace(/_/g, "/") + "===".slice((parts[1].length + 3) % 4)));
      const user = String(claims.u || "");
      return user.includes("/") ? user.slice(0, user.indexOf("/")).split("~")[0] : null;
    } catch {
      return null;
    }
  }

  return {
    get hub() { return hub; },
    get base() { return base; },
    defaultHub: document.documentElement.dataset.hub,
    use, hubOfUserToken, canSign, parseConnectionString, sasToken, call, HubError, element, show, relativeTime, duration,
  };
})();
