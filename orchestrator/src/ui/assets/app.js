// Cairn dashboard: the core every page uses. Elements are built with `el` (text always set as textContent,
// never parsed as HTML: goals, args and outputs are untrusted), the API is called with `api` (session cookie
// plus the CSRF token on state changes), and `route` renders the page the path names.
"use strict";

const Cairn = (() => {
  // Attributes set as properties where the DOM has one for them; everything else with setAttribute.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "value") node.value = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function cookie(name) {
    const pair = document.cookie.split(";").map((c) => c.trim()).find((c) => c.startsWith(name + "="));
    return pair ? decodeURIComponent(pair.slice(name.length + 1)) : null;
  }

  class ApiError extends Error {
    constructor(status, body) {
      super((body && (body.message || body.code)) || `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  // Calls the JSON API. Without a session (401) the login form takes over; other refusals throw ApiError.
  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const csrf = cookie("cairn_csrf");
    if (csrf && method !== "GET") headers["X-CSRF-Token"] = csrf;
    const answer = await fetch(path, {
      method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await answer.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = { message: text }; }
    if (answer.status === 401 && cookie("cairn_csrf") !== null) { location.assign("/ui/login"); }
    if (!answer.ok) throw new ApiError(answer.status, data);
    return data;
  }

  let toastTimer = null;
  function toast(message, bad) {
    const box = document.getElementById("toast");
    box.textContent = message;
    box.className = "show" + (bad ? " bad" : "");
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { box.className = ""; }, bad ? 6000 : 2500);
  }

  // Runs an operator action: reports the refusal's code and message, or `done` then calls `after`.
  async function act(label, method, path, body, after) {
    try {
      const answer = await api(method, path, body);
      toast(`${label}: done`);
      if (after) after(answer);
    } catch (e) {
      const code = e.body && e.body.code ? `${e.body.code}: ` : "";
      toast(`${label} refused — ${code}${e.message}`, true);
    }
  }

  function status(name) { return el("span", { class: `status ${name}`, "data-status": name, text: name }); }

  function duration(ms) {
    if (ms === null || ms === undefined || ms < 0) return "—";
    if (ms < 1000) return `${ms} ms`;
    const s = Math.round(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${s % 60} s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${m % 60} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  function age(ms) { return ms ? `${duration(Date.now() - ms)} ago` : "—"; }

  function time(ms) {
    if (!ms) return "—";
    const d = new Date(ms);
    return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
  }

  function json(value) { return JSON.stringify(value, null, 2); }

  function labels(run) {
    const all = run.labels && typeof run.labels === "object" ? Object.entries(run.labels) : [];
    return all.map(([k, v]) => el("span", { class: "chip", text: `${k}=${v}` }));
  }

  // The page's live streams and timers, closed when another page is rendered.
  let closers = [];
  function onLeave(close) { closers.push(close); }

  // Opens an SSE stream that re-renders through `onEvent`; EventSource reconnects by itself.
  function live(path, events, onEvent) {
    const source = new EventSource(path, { withCredentials: true });
    for (const name of events) source.addEventListener(name, onEvent);
    onLeave(() => source.close());
    return source;
  }

  const pages = [];
  function page(pattern, nav, render) { pages.push({ pattern, nav, render }); }

  function route() {
    for (const close of closers) close();
    closers = [];
    const main = document.getElementById("main");
    main.replaceChildren();
    const path = location.pathname.replace(/\/+$/, "") || "/ui";
    for (const { pattern, nav, render } of pages) {
      const match = path.match(pattern);
      if (!match) continue;
      for (const link of document.querySelectorAll("#nav a")) {
        link.classList.toggle("active", link.dataset.nav === nav);
      }
      render(main, match.slice(1).map(decodeURIComponent), new URLSearchParams(location.search));
      return;
    }
    main.append(el("p", { class: "empty", text: "No such page." }));
  }

  function go(url) {
    history.pushState(null, "", url);
    route();
    window.scrollTo(0, 0);
  }

  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[href^='/ui']");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey || link.target) return;
    event.preventDefault();
    go(link.getAttribute("href"));
  });
  window.addEventListener("popstate", route);
  window.addEventListener("DOMContentLoaded", () => {
    // The logout button only means something when there is a session (not under `cairn dev`).
    document.getElementById("logout").hidden = cookie("cairn_csrf") === null;
    route();
  });

  function errorBox(e) { return el("div", { class: "error-box", text: e.message || String(e) }); }

  return { el, append, api, act, toast, status, duration, age, time, json, labels, live, onLeave, page, go,
    errorBox, ApiError };
})();
