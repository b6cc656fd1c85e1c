// The run list (`/ui`) and the "needs attention" inbox (`/ui/attention`): `GET /v1/runs` with the filters
// passed straight through as its query parameters, kept current by the same request as an SSE stream.
"use strict";

const RunList = (() => {
  const { el, api, status, duration, age, labels, live, page } = Cairn;

  // Filters of `GET /v1/runs` the form edits; `label` repeats (`label=team:ops&label=env:prod`).
  const FIELDS = ["status", "q", "action", "created_after", "created_before"];
  const STATUSES = ["", "pending", "running", "paused", "succeeded", "failed", "cancelled"];

  function table(runs) {
    if (!runs.length) return el("p", { class: "empty", id: "no-runs", text: "No runs match." });
    // Goal and labels are columns only when the API lists them (an orchestrator before issue 34 does not).
    const hasGoal = runs.some((r) => "goal" in r), hasLabels = runs.some((r) => "labels" in r);
    // With `attention=true` each run says which steps need a person, and why.
    const hasWhy = runs.some((r) => Array.isArray(r.attention));
    const rows = runs.map((run) => {
      const end = run.finished_at_ms || Date.now();
      return el("tr", { "data-run-id": run.id, "data-status": run.status },
        el("td", { "data-label": "Run" }, el("a", { href: `/ui/runs/${encodeURIComponent(run.id)}`, class: "mono run-link",
          text: run.id.length > 14 ? `${run.id.slice(0, 8)}…${run.id.slice(-4)}` : run.id, title: run.id })),
        el("td", { "data-label": "Status" }, status(run.status)),
        hasGoal ? el("td", { "data-label": "Goal", class: "goal", text: run.goal || "—" }) : null,
        hasLabels ? el("td", { "data-label": "Labels", class: "labels" }, labels(run)) : null,
        hasWhy ? el("td", { "data-label": "Needs", class: "why-list" }, (run.attention || []).map((a) =>
          el("div", {}, el("span", { class: "mono", text: a.step_id }), " ",
            el("span", { class: `status ${a.reason}`, text: a.reason.replace(/_/g, " ") })))) : null,
        el("td", { "data-label": "Age", title: new Date(run.created_at_ms).toISOString(), text: age(run.created_at_ms) }),
        el("td", { "data-label": "Duration", text: duration(end - run.created_at_ms) }),
        el("td", { "data-label": "Steps", class: "muted",
          text: `${run.step_count - run.open_steps}/${run.step_count}` }));
    });
    return el("table", { class: "grid", id: "runs" },
      el("thead", {}, el("tr", {}, ["Run", "Status", hasGoal && "Goal", hasLabels && "Labels", hasWhy && "Needs", "Age", "Duration", "Steps"]
        .filter(Boolean).map((h) => el("th", { text: h })))),
      el("tbody", {}, rows));
  }

  // Milliseconds <-> the value of a datetime-local input (local time).
  function toLocalInput(ms) {
    if (!ms) return "";
    const d = new Date(Number(ms));
    return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  }

  function filterForm(params, onApply) {
    const input = (name, attrs) => el("input", { name, id: `f-${name}`, value: params.get(name) || "", ...attrs });
    const statusSelect = el("select", { name: "status", id: "f-status" },
      STATUSES.map((s) => el("option", { value: s, text: s || "any", selected: params.get("status") === s })));
    const form = el("form", { class: "filters panel", id: "filters" },
      el("label", {}, "Status", statusSelect),
      el("label", {}, "Labels (key:value …)", input("label", { placeholder: "team:ops env:prod",
        value: params.getAll("label").join(" ") })),
      el("label", {}, "Goal contains", input("q", { placeholder: "umbrella" })),
      el("label", {}, "Action", input("action", { placeholder: "http.request" })),
      el("label", {}, "Created after", input("created_after", { type: "datetime-local",
        value: toLocalInput(params.get("created_after")) })),
      el("label", {}, "Created before", input("created_before", { type: "datetime-local",
        value: toLocalInput(params.get("created_before")) })),
      el("label", { class: "check" }, el("input", { type: "checkbox", name: "attention", id: "f-attention",
        checked: params.get("attention") === "true" }), "Needs attention"),
      el("div", { class: "actions" }, el("button", { type: "submit", class: "primary", id: "apply", text: "Apply" }),
        el("button", { type: "reset", text: "Clear", onclick: () => setTimeout(() => onApply(new URLSearchParams()), 0) })));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const next = new URLSearchParams();
      const data = new FormData(form);
      for (const name of FIELDS) {
        let value = String(data.get(name) || "").trim();
        if (value && name.startsWith("created_")) value = String(new Date(value).getTime());
        if (value) next.set(name, value);
      }
      for (const pair of String(data.get("label") || "").split(/[\s,]+/).filter(Boolean)) next.append("label", pair);
      if (data.get("attention")) next.set("attention", "true");
      onApply(next);
    });
    return form;
  }

  // Renders a live page of runs for `query` into `holder`, with cursor (or offset) paging.
  function livePage(holder, query, onPage) {
    const path = `/v1/runs?${query}`;
    const render = (answer) => {
      const runs = answer.runs || [];
      const pager = el("div", { class: "pager" });
      const next = new URLSearchParams(query);
      if (answer.next_cursor) {
        next.set("cursor", answer.next_cursor);
      } else if (answer.limit && runs.length === answer.limit) {
        next.set("offset", String((answer.offset || 0) + runs.length)); // before cursors existed
      } else {
        next.delete("cursor");
      }
      if (query.has("cursor") || query.has("offset")) {
        const first = new URLSearchParams(query);
        first.delete("cursor"); first.delete("offset");
        pager.append(el("button", { type: "button", text: "First page", onclick: () => onPage(first) }));
      }
      if (next.toString() !== query.toString() && (next.has("cursor") || next.has("offset"))) {
        pager.append(el("button", { type: "button", id: "next-page", text: "Next page", onclick: () => onPage(next) }));
      }
      holder.replaceChildren(table(runs), pager);
    };
    api("GET", path).then(render).catch((e) => holder.replaceChildren(Cairn.errorBox(e)));
    live(path, ["runs"], (event) => render(JSON.parse(event.data)));
  }

  function runsPage(main, _match, params) {
    const holder = el("div", { class: "panel", id: "run-list" }, el("p", { class: "empty", text: "Loading…" }));
    const apply = (next) => Cairn.go(`/ui${next.toString() ? "?" + next : ""}`);
    main.append(el("h1", { text: "Runs" }),
      el("p", { class: "sub", text: "Every run, newest first. The list updates itself as runs move." }),
      filterForm(params, apply), holder);
    livePage(holder, params, apply);
  }

  function attentionPage(main, _match, params) {
    const query = new URLSearchParams(params);
    query.set("attention", "true");
    const holder = el("div", { class: "panel", id: "run-list" }, el("p", { class: "empty", text: "Loading…" }));
    main.append(el("h1", { text: "Needs attention" }),
      el("p", { class: "sub", text: "Runs with a step in outcome_unknown, an approval waiting, a step waiting for a " +
        "worker, or a retry in backoff." }), holder);
    livePage(holder, query, (next) => Cairn.go(`/ui/attention?${next}`));
  }

  page(/^\/ui$/, "runs", runsPage);
  page(/^\/ui\/attention$/, "attention", attentionPage);
  return { table };
})();
