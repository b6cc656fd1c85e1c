// The run page's two drawings: the plan's DAG as an inline SVG (one <g data-step-id data-status> per step,
// one <path data-from data-to> per dependency), laid out in longest-path layers from top to bottom, and the
// timeline of attempts (one bar per attempt, waits hatched between and after them).
"use strict";

const RunGraph = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const NODE_W = 168, NODE_H = 46, GAP_X = 26, GAP_Y = 44, PAD = 12;

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat(Infinity)) if (child) node.append(child);
    return node;
  }

  // Layer of each step: 0 for roots, else one more than its deepest dependency (longest path), so every edge
  // points down. Dependencies naming no step of the plan are ignored (validation refuses them anyway).
  function layers(steps) {
    const byId = new Map(steps.map((s) => [s.id, s]));
    const layer = new Map();
    const visiting = new Set();
    const depth = (id) => {
      if (layer.has(id)) return layer.get(id);
      if (visiting.has(id)) return 0; // a cycle cannot be stored; never loop on one
      visiting.add(id);
      const deps = (byId.get(id).depends_on || []).filter((d) => byId.has(d));
      const value = deps.length ? 1 + Math.max(...deps.map(depth)) : 0;
      layer.set(id, value);
      return value;
    };
    steps.forEach((s) => depth(s.id));
    return layer;
  }

  function clip(text, max) { return text.length > max ? text.slice(0, max - 1) + "…" : text; }

  // `plan.steps` give the shape, `viewSteps` (the run view's steps) the status of each.
  function dag(planSteps, viewSteps, selected, onSelect) {
    const statusOf = new Map(viewSteps.map((s) => [s.id, s.status]));
    const layer = layers(planSteps);
    const rows = [];
    for (const step of planSteps) {
      const l = layer.get(step.id);
      (rows[l] = rows[l] || []).push(step);
    }
    const widest = Math.max(1, ...rows.map((r) => r.length));
    const width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X;
    const height = PAD * 2 + rows.length * NODE_H + Math.max(0, rows.length - 1) * GAP_Y;
    const at = new Map();
    rows.forEach((row, l) => {
      const rowWidth = row.length * NODE_W + (row.length - 1) * GAP_X;
      const left = (width - rowWidth) / 2;
      row.forEach((step, i) => at.set(step.id, { x: left + i * (NODE_W + GAP_X), y: PAD + l * (NODE_H + GAP_Y) }));
    });
    const edges = [];
    for (const step of planSteps) {
      for (const dep of step.depends_on || []) {
        const from = at.get(dep), to = at.get(step.id);
        if (!from || !to) continue;
        const x1 = from.x + NODE_W / 2, y1 = from.y + NODE_H, x2 = to.x + NODE_W / 2, y2 = to.y;
        const mid = (y1 + y2) / 2;
        edges.push(svg("path", { class: "edge", "data-from": dep, "data-to": step.id, "marker-end": "url(#arrow)",
          d: `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2 - 2}` }));
      }
    }
    const nodes = planSteps.map((step) => {
      const { x, y } = at.get(step.id);
      const state = statusOf.get(step.id) || "pending";
      return svg("g", { class: "node" + (step.id === selected ? " selected" : ""), "data-step-id": step.id,
        "data-status": state, transform: `translate(${x},${y})`, tabindex: 0, role: "button",
        onclick: () => onSelect(step.id), onkeydown: (e) => { if (e.key === "Enter") onSelect(step.id); } },
      svg("title", { text: `${step.id} (${step.action}): ${state}` }),
      svg("rect", { width: NODE_W, height: NODE_H, rx: 6 }),
      svg("rect", { class: "bar", width: 5, height: NODE_H, rx: 2 }),
      svg("text", { x: 14, y: 19, text: clip(step.id, 20) }),
      svg("text", { x: 14, y: 35, class: "action", text: clip(`${step.action} · ${state}`, 26) }));
    });
    const arrow = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z",
      fill: "#b3bac6" })));
    return svg("svg", { id: "dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": "The plan's steps and their dependencies" }, arrow, edges, nodes);
  }

  // One row per step; bars from each attempt's start to its end (now while running); hatched waits before
  // the first attempt (from the run's creation: dependencies, timers, approvals) and between attempts
  // (backoff), and after the last one while the step waits to run again.
  function timeline(run, now) {
    const { el } = Cairn;
    const start = run.created_at_ms;
    const ends = run.steps.flatMap((s) => (s.attempt_records || []).map((a) => a.ended_at_ms || now));
    const finish = Math.max(start + 1000, run.finished_at_ms || now, ...ends);
    const span = finish - start;
    const pct = (t) => `${(Math.max(0, Math.min(span, t - start)) / span) * 100}%`;
    const place = (node, from, to) => {
      node.style.left = pct(from);
      node.style.width = `calc(${pct(to)} - ${pct(from)})`;
      return node;
    };
    const rows = run.steps.map((step) => {
      const track = el("div", { class: "tl-track" });
      let cursor = null;
      for (const a of step.attempt_records || []) {
        if (cursor !== null && a.started_at_ms > cursor) {
          track.append(place(el("div", { class: "tl-wait", title: "waiting to retry (backoff)" }), cursor, a.started_at_ms));
        }
        const end = a.ended_at_ms || now;
        const kind = ["succeeded", "failed", "running"].includes(a.status) ? a.status : "other";
        track.append(place(el("div", { class: `tl-bar ${kind}`, "data-attempt": a.attempt, "data-step-id": step.id,
          title: `${step.id} attempt ${a.attempt}: ${a.status}, ${Cairn.duration(end - a.started_at_ms)}` }),
        a.started_at_ms, end));
        cursor = end;
      }
      const waiting = ["ready", "waiting_approval", "pending"].includes(step.status) && run.finished_at_ms === null;
      if (waiting) {
        const from = cursor !== null ? cursor : start;
        const why = step.status === "waiting_approval" ? "waiting for approval" : step.timer ? "waiting for its timer"
          : cursor !== null ? "waiting to retry" : "waiting";
        track.append(place(el("div", { class: "tl-wait", title: why }), from, now));
      }
      return el("div", { class: "tl-row", "data-step-id": step.id },
        el("div", { class: "tl-name", title: step.id, text: step.id }), track);
    });
    return el("div", { class: "timeline", id: "timeline" }, rows,
      el("div", { class: "tl-axis" }, el("span", { text: Cairn.time(start) }),
        el("span", { text: `${Cairn.duration(span)}` })));
  }

  return { dag, timeline, layers };
})();
