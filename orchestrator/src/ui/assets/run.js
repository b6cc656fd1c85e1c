// The run page (`/ui/runs/{id}`): the run's facts and operator actions, its DAG (from `GET /v1/runs/{id}/plan`,
// read once), the timeline of attempts and the selected step's detail (args, output, failure records,
// checkpoint, deliveries from `GET /v1/runs/{id}/deliveries`, why it waits) with the step's actions. It re-reads `GET /v1/runs/{id}` whenever the run's history stream (`GET /v1/runs/{id}/events` as
// SSE) reports an event, so what it shows follows the run.
"use strict";

(() => {
  const { el, api, act, status, duration, time, json, labels, live, page } = Cairn;

  // History event kinds the stream sends (core's EventKind); any of them means the view changed.
  const KINDS = ["run_created", "run_succeeded", "run_failed", "run_cancelled", "run_reopened", "run_paused",
    "run_resumed", "step_ready", "step_started", "step_succeeded", "step_failed", "step_retry_scheduled",
    "step_outcome_unknown", "step_cancelled", "step_skipped", "step_unclaimed", "step_waiting_approval",
    "step_approved", "step_rejected", "step_approval_timed_out", "step_waiting_event", "step_event_received",
    "step_event_timed_out", "step_reopened", "operator_retry", "operator_skip", "operator_fail"];

  function operatorNotes() {
    const by = el("input", { id: "op-by", placeholder: "your name", value: localStorage.getItem("cairn.by") || "" });
    by.addEventListener("change", () => localStorage.setItem("cairn.by", by.value.trim()));
    const reason = el("input", { id: "op-reason", placeholder: "why (recorded in the history)" });
    const read = () => {
      const body = { by: by.value.trim() || "dashboard" };
      if (reason.value.trim()) body.reason = reason.value.trim();
      return body;
    };
    const node = el("div", { class: "operator" }, el("label", {}, "Decided by", by), el("label", {}, "Reason", reason));
    return { node, read };
  }

  // Run-level actions: what the run's status allows.
  function runActions(run, notes, refresh, keep) {
    const base = `/v1/runs/${encodeURIComponent(run.id)}`;
    const open = run.finished_at_ms === null;
    const button = (id, label, verb, body, cls) => el("button", { id, class: cls, type: "button", text: label,
      onclick: () => act(label, "POST", `${base}:${verb}`, body(), refresh) });
    const buttons = [];
    if (open) buttons.push(button("run-cancel", "Cancel", "cancel", notes.read, "danger"));
    if (open && run.status !== "paused") buttons.push(button("run-pause", "Pause", "pause", notes.read));
    if (run.status === "paused") buttons.push(button("run-resume", "Resume", "resume", notes.read, "primary"));
    if (run.status === "failed" || run.status === "cancelled") {
      buttons.push(button("run-redrive", "Redrive", "redrive", notes.read, "primary"));
    }
    const from = keep("rerun-from", () => el("select", { id: "rerun-from", "aria-label": "step to rerun from" },
      run.steps.map((s) => el("option", { value: s.id, text: s.id }))));
    buttons.push(el("span", { class: "actions" }, from, el("button", { id: "run-rerun", type: "button",
      text: "Rerun from", onclick: () => act("Rerun", "POST", `${base}:rerun`, { ...notes.read(), from: from.value },
        (created) => Cairn.go(`/ui/runs/${encodeURIComponent(created.id)}`)) })));
    return el("div", { class: "actions", id: "run-actions" }, buttons);
  }

  function whyWaiting(run, step) {
    if (step.waiting_for && step.waiting_for.kind === "worker") {
      return `No connected worker serves ${step.waiting_for.action}.`;
    }
    if (run.status === "paused" && !["succeeded", "failed", "skipped", "cancelled"].includes(step.status)) {
      return "The run is paused: no new attempt starts until it is resumed.";
    }
    if (step.status === "waiting_approval") {
      return step.available_at_ms ? `Waiting for approval (deadline ${time(step.available_at_ms)}).` : "Waiting for approval.";
    }
    if (step.status === "outcome_unknown") {
      return "The last attempt's outcome is unknown (the step is not idempotent): retry, skip or fail it.";
    }
    if (step.status === "pending") return "Waiting for its dependencies.";
    if (step.status === "ready" && step.timer && step.available_at_ms > Date.now()) {
      return `Waiting for its timer: ${step.timer.local || time(step.timer.not_before_at_ms)}.`;
    }
    if (step.status === "ready" && step.attempts > 0 && step.available_at_ms > Date.now()) {
      return `Retrying after backoff, at ${time(step.available_at_ms)}.`;
    }
    if (step.status === "ready") return "Ready: waiting for a worker to claim it.";
    return null;
  }

  function stepActions(run, step, notes, refresh, keep) {
    const base = `/v1/runs/${encodeURIComponent(run.id)}/steps/${encodeURIComponent(step.id)}`;
    const button = (id, label, verb, body, cls) => el("button", { id, class: cls, type: "button", text: label,
      onclick: () => act(label, "POST", `${base}:${verb}`, body(), refresh) });
    const decision = () => ({ by: notes.read().by });
    const parts = [];
    if (step.status === "waiting_approval") {
      parts.push(el("div", { class: "actions" }, button("step-approve", "Approve", "approve", decision, "primary"),
        button("step-reject", "Reject", "reject", decision, "danger")));
    }
    if (step.status === "failed" || step.status === "outcome_unknown") {
      // Kept across re-renders (live updates, the ticker) so an edit in progress survives them.
      const editor = keep(`retry-args/${step.id}/${step.args_revision}/${step.attempts}`, () => {
        const area = el("textarea", { id: "retry-args", spellcheck: "false", "aria-label": "args for the retry" });
        area.value = json(step.args === undefined ? {} : step.args);
        return area;
      });
      const retry = () => {
        const body = notes.read();
        const text = editor.value.trim();
        let args;
        try { args = JSON.parse(text); } catch (e) { Cairn.toast(`The args are not JSON: ${e.message}`, true); return; }
        if (JSON.stringify(args) !== JSON.stringify(step.args)) body.args = args;
        act("Retry", "POST", `${base}:retry`, body, refresh);
      };
      parts.push(el("h3", { text: "Retry" }),
        el("p", { class: "muted", text: "Edit the args to retry with repaired ones (validated before anything runs); " +
          "unchanged args keep the step's idempotency key." }), editor,
        el("div", { class: "actions" }, el("button", { id: "step-retry", class: "primary", type: "button",
          text: "Retry step", onclick: retry })));
    }
    if (step.status === "outcome_unknown") {
      parts.push(el("div", { class: "actions" }, button("step-skip", "Skip", "skip", decision),
        button("step-fail", "Fail", "fail", decision, "danger")));
    }
    return parts;
  }

  function detail(run, step, notes, refresh, keep, deliveries) {
    const why = whyWaiting(run, step);
    const facts = el("dl", {},
      el("dt", { text: "Status" }), el("dd", {}, status(step.status)),
      el("dt", { text: "Action" }), el("dd", { class: "mono", text: step.action }),
      el("dt", { text: "Attempts" }), el("dd", { text: String(step.attempts) }),
      el("dt", { text: "Started" }), el("dd", { text: time(step.started_at_ms) }),
      el("dt", { text: "Finished" }), el("dd", { text: time(step.finished_at_ms) }),
      el("dt", { text: "Took" }), el("dd", { text: step.started_at_ms
        ? duration((step.finished_at_ms || Date.now()) - step.started_at_ms) : "—" }));
    const section = (title, value) => (value === null || value === undefined ? null
      : [el("h3", { text: title }), el("pre", { text: json(value) })]);
    const failures = (step.failures || []).map((f) => el("div", { class: "failure" },
      el("div", {}, el("span", { class: "code", text: f.code }), " · attempt ", String(f.attempt || "?"),
        f.suggestion ? el("span", { class: "muted", text: ` · suggestion: ${f.suggestion}` }) : null),
      el("div", { text: f.message })));
    return el("div", { class: "panel step-detail", id: "step-detail", "data-step-id": step.id },
      el("h2", {}, "Step ", el("span", { class: "mono", text: step.id })),
      why ? el("div", { class: "why", id: "why-waiting", text: why }) : null,
      facts,
      stepActions(run, step, notes, refresh, keep),
      section(step.args_revision ? `Args (repaired, revision ${step.args_revision})` : "Args", step.args),
      // Placeholders resolved against the run as it stands; shown when they differ from the args as written.
      step.resolved_args !== null && step.resolved_args !== undefined &&
        JSON.stringify(step.resolved_args) !== JSON.stringify(step.args) ? section("Resolved args", step.resolved_args) : null,
      deliveriesOf(deliveries, step),
      section("Output", step.output),
      // The error is the last failure record when there are records; shown alone only without them.
      step.error && !failures.length ? section("Error", step.error) : null,
      failures.length ? [el("h3", { text: `Failure records (${failures.length})` }), failures] : null,
      section("Checkpoint", step.checkpoint));
  }

  // The step's delivery ledger: one row per recipient and channel, with tries and why the last one failed.
  function deliveriesOf(deliveries, step) {
    const rows = (deliveries || []).filter((d) => d.step_id === step.id);
    if (!rows.length) return null;
    const head = el("tr", {}, ["Recipient", "Channel", "Status", "Tries", "Provider id", "Last error"]
      .map((t) => el("th", { text: t })));
    const body = rows.map((d) => el("tr", { "data-channel": d.channel, "data-recipient": d.recipient_id },
      el("td", { class: "mono", text: d.recipient_id || "(worker)" }), el("td", { text: d.channel }),
      el("td", {}, status(d.status)), el("td", { text: String(d.attempts) }),
      el("td", { class: "mono", text: d.provider_message_id || "—" }), el("td", { text: d.last_error || "" })));
    return [el("h3", { text: `Deliveries (${rows.length})` }),
      el("table", { class: "grid", id: "step-deliveries" }, el("thead", {}, head), el("tbody", {}, body))];
  }

  function defaultStep(run) {
    const pick = (s) => run.steps.find((x) => x.status === s);
    return (pick("waiting_approval") || pick("outcome_unknown") || pick("failed") || pick("running")
      || run.steps[0] || {}).id;
  }

  function runPage(main, [id]) {
    const state = { run: null, plan: null, selected: null, deliveries: [] };
    const notes = operatorNotes();
    const kept = new Map();
    const keep = (key, make) => {
      if (!kept.has(key)) kept.set(key, make());
      return kept.get(key);
    };
    // The history stream ends once the run has finished; it is opened again when an action reopens the run.
    let stream = null;
    const follow = (open) => {
      if (open && !stream) stream = live(`/v1/runs/${encodeURIComponent(id)}/events`, KINDS, refresh);
      if (!open && stream) { stream.close(); stream = null; }
    };
    const holder = el("div", {}, el("p", { class: "empty", text: "Loading…" }));
    main.append(holder);
    // One read at a time; events that arrive during a read ask for one more read after it, so a burst of
    // history (the stream replays it on connect) costs two reads, and the last state is never missed.
    let reading = false, again = false;
    const refresh = () => {
      if (reading) { again = true; return; }
      reading = true;
      const base = `/v1/runs/${encodeURIComponent(id)}`;
      Promise.all([api("GET", base), api("GET", `${base}/deliveries`)])
        .then(([run, ledger]) => {
          state.run = run; state.deliveries = ledger.deliveries; render(); follow(run.finished_at_ms === null);
        })
        .catch((e) => holder.replaceChildren(Cairn.errorBox(e)))
        .finally(() => {
          reading = false;
          if (again) { again = false; refresh(); }
        });
    };
    const select = (stepId) => { state.selected = stepId; render(); };
    function render() {
      const run = state.run;
      if (!state.selected || !run.steps.some((s) => s.id === state.selected)) state.selected = defaultStep(run);
      // Until the plan has arrived the DAG shows the steps without their edges.
      const plan = state.plan || { steps: run.steps.map((s) => ({ id: s.id, action: s.action })) };
      const step = run.steps.find((s) => s.id === state.selected);
      const failure = run.failure ? el("div", { class: "error-box", id: "run-failure" },
        el("strong", { text: `${run.failure.code || "failed"}` }), run.failure.step_id ? ` in step ${run.failure.step_id}` : "",
        run.failure.message ? `: ${run.failure.message}` : "",
        run.failure.suggestion ? ` (suggestion: ${run.failure.suggestion})` : "") : null;
      const head = el("div", { class: "panel" },
        el("div", { class: "run-head" },
          el("div", {}, el("h1", {}, "Run ", el("span", { class: "mono", text: run.id })),
            el("p", { class: "sub", id: "run-goal", text: plan.goal || run.goal || "" }),
            el("div", { class: "facts" }, status(run.status), el("span", { text: `created ${time(run.created_at_ms)}` }),
              el("span", { text: `took ${duration((run.finished_at_ms || Date.now()) - run.created_at_ms)}` }),
              el("span", { text: `${run.step_count - run.open_steps}/${run.step_count} steps final` }),
              run.rerun_of ? el("span", {}, "rerun of ", el("a", { href: `/ui/runs/${encodeURIComponent(run.rerun_of)}`,
                class: "mono", text: run.rerun_of })) : null, labels(run))),
          runActions(run, notes, refresh, keep)),
        failure, notes.node);
      const legend = el("div", { class: "legend" }, ["succeeded", "running", "waiting_approval", "failed",
        "outcome_unknown", "pending", "skipped"].map((s) => el("span", { "data-status": s },
        el("i", {}), s)));
      // Kept inputs are moved, not rebuilt, so the one being typed in gets its focus back after the re-render.
      const focused = document.activeElement;
      holder.replaceChildren(head,
        el("div", { class: "run-grid" },
          el("div", {},
            el("div", { class: "panel" }, el("h2", { text: "Plan" }),
              el("div", { class: "dag" }, RunGraph.dag(plan.steps || [], run.steps, state.selected, select)), legend),
            el("div", { class: "panel" }, el("h2", { text: "Timeline of attempts" }), RunGraph.timeline(run, Date.now()))),
          step ? detail(run, step, notes, refresh, keep, state.deliveries) : el("div", { class: "panel empty", text: "No steps." })),
        run.input !== undefined && run.input !== null
          ? el("div", { class: "panel" }, el("h2", { text: "Input" }), el("pre", { text: json(run.input) })) : null);
      if (focused && focused !== document.activeElement && holder.contains(focused)) focused.focus();
    }
    refresh();
    // The plan never changes: read once, beside the first view.
    api("GET", `/v1/runs/${encodeURIComponent(id)}/plan`)
      .then((plan) => { state.plan = plan; if (state.run) render(); })
      .catch((e) => Cairn.toast(`The plan could not be read: ${e.message}`, true));
    // Running bars and ages grow with time even when no event arrives.
    const ticker = setInterval(() => { if (state.run && state.run.finished_at_ms === null) render(); }, 5000);
    Cairn.onLeave(() => clearInterval(ticker));
  }

  page(/^\/ui\/runs\/([^/]+)$/, "runs", runPage);
})();
