// The inboxes: approvals waiting (`GET /v1/approvals`, approve or reject in place), schedules (next fire
// times, pause/resume, run now) and workers with the actions each serves (`GET /v1/actions`). They re-read
// every few seconds: these lists are small and have no stream of their own.
"use strict";

(() => {
  const { el, api, act, time, age, page } = Cairn;
  const REREAD_MS = 3000;

  // Renders `load()` into a panel now and every REREAD_MS while the page is shown.
  function polled(main, title, sub, load) {
    const holder = el("div", { class: "panel" }, el("p", { class: "empty", text: "Loading…" }));
    main.append(el("h1", { text: title }), el("p", { class: "sub", text: sub }), holder);
    const draw = () => load().then((node) => holder.replaceChildren(node))
      .catch((e) => holder.replaceChildren(Cairn.errorBox(e)));
    draw();
    const timer = setInterval(draw, REREAD_MS);
    Cairn.onLeave(() => clearInterval(timer));
    return draw;
  }

  function grid(id, headers, rows, empty) {
    if (!rows.length) return el("p", { class: "empty", text: empty });
    return el("table", { class: "grid", id },
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { text: h })))),
      el("tbody", {}, rows));
  }

  function runLink(runId) {
    return el("a", { href: `/ui/runs/${encodeURIComponent(runId)}`, class: "mono", title: runId,
      text: runId.length > 14 ? `${runId.slice(0, 8)}…${runId.slice(-4)}` : runId });
  }

  function approvalsPage(main) {
    const by = () => ({ by: localStorage.getItem("cairn.by") || "dashboard" });
    const draw = polled(main, "Approvals", "Steps waiting for a person's decision, oldest first.", async () => {
      const { approvals } = await api("GET", "/v1/approvals");
      const rows = approvals.map((a) => {
        const base = `/v1/runs/${encodeURIComponent(a.run_id)}/steps/${encodeURIComponent(a.step_id)}`;
        return el("tr", { "data-run-id": a.run_id, "data-step-id": a.step_id },
          el("td", { "data-label": "Run" }, runLink(a.run_id)),
          el("td", { "data-label": "Step", class: "mono", text: a.step_id }),
          el("td", { "data-label": "Action", class: "mono", text: a.action }),
          el("td", { "data-label": "Waiting", text: age(a.waiting_since_ms) }),
          el("td", { "data-label": "Deadline", text: a.deadline_ms ? `${time(a.deadline_ms)} (then ${a.on_timeout})` : "none" }),
          el("td", {}, el("div", { class: "actions" },
            el("button", { class: "primary approve", type: "button", text: "Approve",
              onclick: () => act("Approve", "POST", `${base}:approve`, by(), draw) }),
            el("button", { class: "danger reject", type: "button", text: "Reject",
              onclick: () => act("Reject", "POST", `${base}:reject`, by(), draw) }))));
      });
      return grid("approvals", ["Run", "Step", "Action", "Waiting", "Deadline", ""], rows, "Nothing waits for approval.");
    });
  }

  function schedulesPage(main) {
    const draw = polled(main, "Schedules", "Cron schedules and when each fires next. Run now obeys the overlap policy.",
      async () => {
        const { schedules } = await api("GET", "/v1/schedules");
        const upcoming = await Promise.all(schedules.map((s) =>
          api("GET", `/v1/schedules/${encodeURIComponent(s.id)}/next?count=3`).then((n) => n.next).catch(() => [])));
        const rows = schedules.map((s, i) => {
          const base = `/v1/schedules/${encodeURIComponent(s.id)}`;
          return el("tr", { "data-schedule-id": s.id },
            el("td", { "data-label": "Schedule", class: "mono", text: s.id }),
            el("td", { "data-label": "Cron" }, el("span", { class: "mono", text: s.cron }), " ",
              el("span", { class: "muted", text: s.timezone })),
            el("td", { "data-label": "State" }, Cairn.status(s.paused ? "paused" : "running")),
            el("td", { "data-label": "Next" }, upcoming[i].length
              ? upcoming[i].map((f) => el("div", { text: f.local || f.at })) : el("span", { class: "muted", text: "—" })),
            el("td", { "data-label": "Last run" }, s.last_run_id ? runLink(s.last_run_id) : "—"),
            el("td", {}, el("div", { class: "actions" },
              el("button", { class: "primary run-now", type: "button", text: "Run now",
                onclick: () => act("Run now", "POST", `${base}:trigger`, undefined,
                  (started) => started && started.run_id && Cairn.go(`/ui/runs/${encodeURIComponent(started.run_id)}`)) }),
              s.paused
                ? el("button", { type: "button", text: "Resume", onclick: () => act("Resume", "POST", `${base}:resume`, undefined, draw) })
                : el("button", { type: "button", text: "Pause", onclick: () => act("Pause", "POST", `${base}:pause`, undefined, draw) }))));
        });
        return grid("schedules", ["Schedule", "Cron", "State", "Next fire times", "Last run", ""], rows, "No schedules.");
      });
  }

  function workersPage(main) {
    polled(main, "Workers", "Workers seen in the last 24 hours, the actions each serves and the attempts it runs now.",
      async () => {
        const [{ workers }, { actions }] = await Promise.all([api("GET", "/v1/workers"), api("GET", "/v1/actions")]);
        const rows = workers.map((w) => el("tr", { "data-worker-id": w.worker_id },
          el("td", { "data-label": "Worker", class: "mono", text: w.worker_id }),
          el("td", { "data-label": "State" }, el("span", { class: `status ${w.connected ? "succeeded" : "cancelled"}`, text: w.connected ? "connected" : "gone" })),
          el("td", { "data-label": "Last seen", title: time(w.last_seen_at), text: age(w.last_seen_at) }),
          el("td", { "data-label": "In flight", class: "in-flight", text: String(w.in_flight) }),
          el("td", { "data-label": "Actions" }, w.actions.map((a) => el("span", { class: "chip", text: a })))));
        const unserved = actions.filter((a) => !a.connected).map((a) => a.name);
        return el("div", {},
          grid("workers", ["Worker", "State", "Last seen", "In flight", "Actions"], rows, "No worker seen lately."),
          unserved.length ? el("p", { class: "muted", id: "unserved" }, "No connected worker serves: ",
            unserved.map((a) => el("span", { class: "chip", text: a }))) : null);
      });
  }

  page(/^\/ui\/approvals$/, "approvals", approvalsPage);
  page(/^\/ui\/schedules$/, "schedules", schedulesPage);
  page(/^\/ui\/workers$/, "workers", workersPage);
})();
