// azlease ui: the page. Plain JavaScript, no dependencies, no build step.
// It reads the JSON of /api/... every refresh_seconds (the server says how
// often) and draws it. Every value goes in through textContent, never as
// HTML. When storage or the server does not answer, it says so and shows
// no older data.
"use strict";

(function () {
  const path = location.pathname;
  const isItem = path.startsWith("/items/");
  const api = isItem ? "/api" + path : "/api/overview";
  const PALETTE = 12; // .c0 … .c11 in style.css
  let refreshMs = 5000;
  let reads = 0;
  // When the data on screen arrived (this machine's clock), and the read it
  // came from; a fetch still waiting for storage past staleMs hides it.
  let shownAt = 0;
  let shownReadAt = "";
  const staleMs = () => refreshMs + 10000; // a read retries for up to 6 s
  const openDetails = {}; // which <details> the reader opened, kept across redraws

  // el makes an element: el("td", {class: "x"}, "text", child, …).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else if (k === "style") Object.assign(e.style, v); // CSSOM: the CSP allows no style attributes
      else e.setAttribute(k, v);
    }
    for (const k of kids) {
      if (k === undefined || k === null) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  function stamp(iso) {
    if (!iso) return "—";
    return iso.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC");
  }

  function ago(iso, now) {
    if (!iso) return "";
    let s = Math.round(((now || Date.now()) - Date.parse(iso)) / 1000);
    const sign = s < 0 ? "in " : "";
    s = Math.abs(s);
    let t;
    if (s < 90) t = s + " s";
    else if (s < 5400) t = Math.round(s / 60) + " min";
    else if (s < 172800) t = Math.round(s / 3600) + " h";
    else t = Math.round(s / 86400) + " d";
    return sign ? sign + t : t + " ago";
  }

  function duration(ms) {
    const s = Math.round(ms / 1000);
    if (s < 90) return s + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function stateBadge(state) {
    return el("span", { class: "badge state-" + state, "data-state": state }, state || "—");
  }

  function releaseText(r) {
    if (r === "clean") return el("span", { class: "release-clean" }, "clean");
    if (r === "not clean") return el("span", { class: "release-not-clean" }, "not clean (expired or broken)");
    return el("span", { class: "muted" }, "—");
  }

  function link(p, text) {
    return el("a", { href: p }, text);
  }

  function details(key, summary, ...body) {
    const d = el("details", { "data-key": key }, el("summary", {}, summary), ...body);
    if (openDetails[key]) d.open = true;
    d.addEventListener("toggle", () => { openDetails[key] = d.open; });
    return d;
  }

  function table(head, rows, attrs) {
    return el("table", attrs || {},
      el("thead", {}, el("tr", {}, ...head.map(h => el("th", { class: h.num ? "num" : null }, typeof h === "string" ? h : h.text)))),
      el("tbody", {}, ...rows));
  }

  // --- the header, the problem banner, the footer ---

  function showRead(d) {
    document.getElementById("where").textContent =
      d.account + " · container " + d.container + (d.prefix ? " · prefix " + d.prefix : "");
    const r = document.getElementById("read");
    r.textContent = "";
    if (d.read_at) {
      r.append("read " + stamp(d.read_at) + " (" + ago(d.read_at) + ")",
        d.storage.ok ? ": " + d.requests + " List Blobs request" + (d.requests === 1 ? "" : "s") + ", " + d.blobs + " blob" + (d.blobs === 1 ? "" : "s") + ", " + d.took_ms + " ms" : "",
        " · reads every " + d.refresh_seconds + " s");
    }
    r.setAttribute("data-reads", String(reads));
    r.setAttribute("data-read-at", d.read_at || "");
    document.getElementById("cost").textContent =
      "Each read is one List Blobs request per 5,000 blobs, at most one every " + d.refresh_seconds +
      " s however many pages are open, and none while none is.";
  }

  function showProblem(title, detail) {
    const p = document.getElementById("problem");
    p.hidden = false;
    p.textContent = "";
    p.append(el("span", { class: "title" }, title), el("span", { class: "detail" }, detail));
  }

  function clearProblem() {
    const p = document.getElementById("problem");
    p.hidden = true;
    p.textContent = "";
  }

  function setMain(...kids) {
    const m = document.getElementById("main");
    m.textContent = "";
    m.append(...kids);
  }

  // --- the overview ---

  function renderOverview(d) {
    document.title = "azlease ui · " + d.container;
    const rows = d.items.map(it => el("tr", { "data-path": it.path, "data-kind": it.kind, class: "item" },
      el("td", { class: "kind" }, it.kind_label),
      el("td", { class: "name" }, link(it.path, it.name)),
      el("td", { class: "state" }, it.kind === "shard-group" ? groupBadge(it.group) : stateBadge(it.state)),
      el("td", { class: "holder" }, it.holder || ""),
      el("td", { class: "epoch num" }, it.epoch ? String(it.epoch) : ""),
      el("td", { class: "since" }, it.since ? stamp(it.since) : "", it.since ? el("span", { class: "muted" }, " (" + ago(it.since) + ")") : ""),
      el("td", { class: "release" }, it.kind === "shard-group" ? "" : releaseText(it.last_release)),
      el("td", { class: "summary" }, it.summary, waitingNote(it))));
    const kinds = {};
    for (const it of d.items) kinds[it.kind_label] = (kinds[it.kind_label] || 0) + 1;
    const counts = Object.entries(kinds).map(([k, n]) => n + " " + k + (n === 1 ? "" : "s")).join(", ");
    setMain(
      el("h1", {}, "Lock blobs in " + d.container + (d.prefix ? " under " + d.prefix : "")),
      el("p", { class: "muted" }, d.items.length ? counts + ". Since is when the latest term began, by the holder's clock." : "No lock blobs here yet."),
      d.items.length ? table([{ text: "kind" }, { text: "name" }, { text: "state" }, { text: "holder" }, { text: "epoch", num: true },
        { text: "since" }, { text: "last release" }, { text: "summary" }], rows, { id: "items" }) : "",
      el("p", {}, el("a", { href: "/api/blobs" }, "Every lock blob (JSON)"),
        " lists each membership and shard of the shard groups too, with its kind and item."));
  }

  function groupBadge(g) {
    if (!g) return "";
    if (!g.plan_known) return el("span", { class: "badge state-free", "data-state": "plan-unknown" }, "plan not known");
    return g.balanced ? el("span", { class: "badge state-leased", "data-state": "balanced" }, "balanced")
      : el("span", { class: "badge state-expired", "data-state": "misplaced" }, g.misplaced + " misplaced");
  }

  function waitingNote(it) {
    const parts = [];
    if (it.queue && it.queue.length) {
      // Those passed over (missed) are not waiting, as 'azlease status' counts.
      const missed = it.queue.filter(w => w.state === "missed").length;
      parts.push((it.queue.length - missed) + " waiting" + (missed ? ", " + missed + " missed" : ""));
    }
    if (it.candidates && it.candidates.length) {
      const gone = it.candidates.filter(c => c.gone).length;
      parts.push(it.candidates.length + (it.candidates.length === 1 ? " candidate" : " candidates") + (gone ? " (" + gone + " gone)" : ""));
    }
    return parts.length ? el("span", { class: "muted" }, " · " + parts.join(", ")) : "";
  }

  // --- an item's page ---

  function renderItem(d, it) {
    document.title = it.kind_label + " " + it.name + " · azlease ui";
    const parts = [
      el("p", {}, link("/", "← every item")),
      el("h1", {}, it.kind_label + " ", el("span", { class: "mono", id: "item-name" }, it.name)),
    ];
    if (it.kind !== "shard-group") parts.push(facts(it));
    if (it.once) parts.push(...renderOnce(it.once));
    if (it.group) parts.push(...renderGroup(it.group));
    if (it.terms && it.terms.length) parts.push(...renderTimeline(d, it));
    if (["mutex", "semaphore-slot", "lock"].includes(it.kind)) parts.push(...renderQueue(it.queue));
    if (["leader", "lock"].includes(it.kind)) parts.push(...renderCandidates(it.candidates, it.state === "leased" ? it.holder : ""));
    if (it.blobs && it.blobs.length > 1) parts.push(renderBlobs(it.blobs));
    setMain(...parts);
  }

  function facts(it) {
    const dl = el("dl", { class: "facts", id: "facts" });
    const add = (k, cls, ...v) => dl.append(el("dt", {}, k), el("dd", { class: cls }, ...v));
    add("state", "state", stateBadge(it.state));
    if (it.blob) add("lock blob", "blob mono", it.blob);
    add("holder", "holder", it.holder || "—");
    add("epoch", "epoch", it.epoch ? String(it.epoch) : "—");
    add("since", "since", it.since ? stamp(it.since) + " (" + ago(it.since) + ", by the holder's clock)" : "—");
    const last = it.terms && it.terms.length ? it.terms[it.terms.length - 1] : null;
    if (last && last.epoch === it.epoch) add("began", "began", last.began_text);
    add("last release", "release", it.state === "leased" ? "— (held now)" : releaseText(it.last_release));
    if (it.slot) add("semaphore", "slot", "slot " + it.slot.index + " of " + it.slot.semaphore);
    if (it.kind === "leader" && it.state === "leased") {
      const mark = candidateRoles(it.candidates || []);
      if (mark.role === "standby") add("standby", "standby", mark.who);
      else if (mark.who) add("handing over to", "standby", mark.who);
      else add("standby", "standby", el("span", { class: "muted" }, "none"));
    }
    if (it.error) add("record", "error", el("span", { class: "release-not-clean" }, it.error));
    return dl;
  }

  function renderOnce(o) {
    const dl = el("dl", { class: "facts", id: "once" });
    const add = (k, ...v) => dl.append(el("dt", {}, k), el("dd", {}, ...v));
    add("key", el("span", { class: "mono" }, o.key));
    add("state", el("span", { class: "badge once-" + o.state, "data-state": o.state }, o.state), o.running ? " (a runner holds the key now)" : "");
    add("attempts", String(o.attempts) + (o.max_attempts ? " of at most " + o.max_attempts : ""));
    add("by", o.holder || "—");
    add("when", o.time ? stamp(o.time) + " (" + ago(o.time) + ", by the writer's clock)" : "—");
    add("epoch", o.epoch ? String(o.epoch) : "—");
    const out = [el("h2", {}, "Once marker"), dl];
    if (o.last_error) out.push(el("h2", {}, "Recorded error of the last failed attempt"), el("pre", { class: "error", id: "once-error" }, o.last_error));
    return out;
  }

  // The timeline: a lane per holder, a bar per recorded term, and a lane
  // for the times nobody held the lock, from the oldest recorded start to
  // the time of the read. A bar is solid while its holder certainly held
  // the lock; hatched where it may already have stopped (an end nobody saw:
  // an expiry, a break); the "no holder" lane is solid grey where nobody
  // held it, hatched where perhaps nobody worked.
  function renderTimeline(d, it) {
    const terms = it.terms;
    const gaps = it.gaps || [];
    const end = Date.parse(d.read_at);
    let start = Math.min(...terms.map(t => t.start ? Date.parse(t.start) : end));
    if (!(end > start)) start = end - 60000;
    const span = end - start;
    const at = iso => iso ? Date.parse(iso) : end;
    const pos = (s, e) => {
      const left = Math.min(100, Math.max(0, (s - start) / span * 100));
      const width = Math.max(0.3, (Math.min(e, end) - Math.max(s, start)) / span * 100);
      return { left: left.toFixed(3) + "%", width: Math.min(width, 100 - left).toFixed(3) + "%" };
    };
    const holders = [];
    for (const t of terms) if (!holders.includes(t.holder)) holders.push(t.holder);
    const lanes = holders.map((h, i) => {
      const track = el("div", { class: "track" });
      const lane = el("div", { class: "lane", "data-holder": h }, el("span", { class: "lname", title: h }, h), track);
      for (const t of terms.filter(t => t.holder === h)) {
        const s = at(t.start);
        const e = t.end ? Date.parse(t.end) : end;
        const sure = t.sure_until ? Date.parse(t.sure_until) : e;
        const open = !t.end && t.ended === "held now";
        const title = h + ", epoch " + t.epoch + ", from " + stamp(t.start) + " (" + t.began_text + "); " + (t.end && t.end_exact ? "to " + stamp(t.end) + ": " : "") + t.ended;
        const label = h + " · " + t.epoch + (t.began ? " · " + t.began : "");
        track.append(el("div", {
          class: "bar c" + (i % PALETTE) + (open ? " open-end" : t.end || t.sure_until ? "" : " unknown-end"),
          style: pos(s, sure), title, "data-holder": h, "data-epoch": String(t.epoch), "data-began": t.began || "",
          "data-ended-by": t.ended_by || "", "data-label": label, "data-short": t.began || String(t.epoch),
        }, label));
        if (t.sure_until && e > sure) {
          track.append(el("div", {
            class: "bar maybe c" + (i % PALETTE), style: pos(sure, e), "data-epoch": String(t.epoch),
            title: h + " may have stopped anywhere here: " + t.ended,
          }));
        }
      }
      return lane;
    });
    const gapTrack = el("div", { class: "track" });
    for (const g of gaps) {
      gapTrack.append(el("div", {
        class: "gap" + (g.uncertain ? " uncertain" : ""), style: pos(at(g.from), at(g.to)), title: g.text,
        "data-from": g.from || "", "data-to": g.to || "",
      }));
    }
    const rows = terms.slice().reverse().map(t => el("tr", { "data-epoch": String(t.epoch) },
      el("td", { class: "holder" }, t.holder),
      el("td", { class: "num" }, String(t.epoch)),
      el("td", {}, stamp(t.start)),
      el("td", { class: "began", "data-began": t.began || "" }, t.began_text),
      el("td", { class: "ended", "data-ended-by": t.ended_by || "" }, t.ended),
      el("td", { class: "num lasted" }, t.lasted || (t.start ? duration(end - Date.parse(t.start)) + (t.ended === "held now" ? " so far" : " or less") : ""))));
    const gapRows = gaps.slice().reverse().map(g => el("li", { class: g.uncertain ? "uncertain" : "" }, (g.from ? stamp(g.from) : "") + " → " + (g.to ? stamp(g.to) : "now") + ": " + g.text));
    return [
      el("h2", {}, it.kind === "leader" ? "Leadership: recorded terms" : "Recorded terms"),
      el("p", { class: "muted" }, "A lane per holder, a bar per term from its start (by the holder's clock), labelled with how it began. " +
        "A bar ending in a double line is held now; a hatched part is where its holder may already have stopped (its lease expired or was broken, and nobody saw when). " +
        "The last lane shows when nobody held the lock: grey, and hatched where perhaps nobody worked. " +
        "The lock blob keeps its latest terms only (8 by default)."),
      el("div", { class: "timeline", id: "timeline" }, ...lanes,
        el("div", { class: "lane gaps", id: "gaps" }, el("span", { class: "lname" }, "no holder"), gapTrack)),
      el("div", { class: "axis" }, el("span", {}, stamp(new Date(start).toISOString())), el("span", {}, "read at " + stamp(d.read_at))),
      table([{ text: "holder" }, { text: "epoch", num: true }, { text: "started" }, { text: "how it began" }, { text: "how it ended" }, { text: "lasted", num: true }], rows, { id: "terms" }),
      gapRows.length ? details("gaps", "Times without a holder (" + gapRows.length + ")", el("ul", { id: "gap-list" }, ...gapRows)) : "",
    ];
  }

  // fitLabels shortens the labels of bars too narrow for them (to how the
  // term began, or its epoch; then nothing: the lane names the holder, the
  // bar's title says everything), once drawn.
  function fitLabels() {
    for (const b of document.querySelectorAll("#timeline .bar[data-label]")) {
      b.textContent = b.dataset.label;
      if (b.scrollWidth > b.clientWidth) b.textContent = b.dataset.short;
      if (b.scrollWidth > b.clientWidth) b.textContent = "";
    }
  }

  function renderGroup(group) {
    // The API omits a list that is empty (a group whose replicas have not
    // taken a shard yet has no shards and no moves).
    const g = Object.assign({}, group, { members: group.members || [], shards: group.shards || [], moves: group.moves || [] });
    const colour = {};
    for (const m of g.members) colour[m.name] = m.colour % PALETTE;
    // Load: each cell's bar is its load against the heaviest shard's; a
    // member's load against its capacity, as a multiple of the level.
    const maxLoad = Math.max(0, ...g.shards.map(s => s.load || 0));
    const fmt = v => (v || 0).toPrecision(3);
    const perCap = m => g.by_load && g.level ? (m.load / m.weight / g.level).toFixed(2) + " × level" : "—";
    const members = g.members.map(m => el("tr", { "data-member": m.name },
      el("td", {}, el("span", { class: "swatch c" + colour[m.name] }), m.name, m.suspect ? el("span", { class: "release-not-clean" }, " (suspect: a shard's lease expired under it)") : ""),
      el("td", { class: "num" }, String(m.weight)),
      el("td", { class: "num" }, String(m.owns)),
      el("td", { class: "num" }, String(m.share)),
      el("td", { class: "num" }, g.by_load ? fmt(m.load) : "—"),
      el("td", { class: "num", "data-load-per-capacity": perCap(m) }, perCap(m)),
      el("td", {}, m.joined ? stamp(m.joined) : "—")));
    const cells = g.shards.map(s => {
      const c = s.owner ? (s.owner in colour ? "c" + colour[s.owner] : "c11") : "free";
      const notes = [];
      if (!s.owner) notes.push("free");
      if (s.handing_to) notes.push("handing to " + s.handing_to);
      if (s.owner && !(s.owner in colour)) notes.push("owner not a member");
      if (s.outside) notes.push("not in the members' shard list: no replica plans it");
      else if (s.misplaced) notes.push("misplaced: plan says " + (s.planned || "nobody"));
      if ((g.hot || []).includes(s.name)) notes.push("alone exceeds a replica's share: split it");
      if (s.moved) notes.push("moved: " + s.moved);
      const heat = g.by_load && maxLoad > 0 ? (s.load || 0) / maxLoad : 0;
      return el("div", {
        class: "shard " + c + (s.misplaced ? " misplaced" : ""), "data-shard": s.name, "data-owner": s.owner || "",
        "data-load": g.by_load ? fmt(s.load) : "",
        title: "shard " + s.name + ": " + (s.owner ? "owned by " + s.owner + ", epoch " + s.epoch + ", since " + stamp(s.since) : "free") + " (" + s.state + ")" +
          (g.by_load ? ", load " + fmt(s.load) + (s.load_reported ? "" : " (not reported: the mean)") : ""),
      },
      el("span", { class: "sname" }, "shard " + s.name),
      el("span", { class: "owner" }, s.owner || "—"),
      g.by_load ? el("span", { class: "loadbar", style: "width:" + Math.round(100 * heat) + "%" }) : "",
      el("span", { class: "note" }, notes.join("; ")));
    });
    const misplaced = g.shards.filter(s => s.misplaced);
    const moves = g.moves.slice(0, 30).map(m => el("tr", {},
      el("td", {}, stamp(m.at)),
      el("td", {}, m.shard),
      el("td", {}, m.from || "(first recorded term)"),
      el("td", {}, m.to),
      el("td", { class: "num" }, String(m.epoch)),
      el("td", {}, m.why || "")));
    return [
      el("p", { id: "group-state" }, groupBadge(g), " ", g.member_count + " members, " + g.shard_count + " shards, " + g.owned + " owned. " +
        (!g.plan_known ? "What the replicas plan is not known: " + (g.note || "no member publishes its shard list") + "."
          : g.balanced ? "Every shard is where the plan puts it." : g.misplaced + " shards are not where the plan puts them (free ones included).")),
      el("h2", {}, "Members"),
      table([{ text: "member" }, { text: "weight", num: true }, { text: "owns", num: true }, { text: "share", num: true }, { text: "load", num: true },
        { text: "load / weight", num: true }, { text: "joined (its clock)" }], members, { id: "members" }),
      el("h2", {}, "Shards"),
      el("p", { class: "muted" }, "Each cell: the shard, its owner (coloured as in Members, and named), its load as a bar against the heaviest " +
        "shard's (when the replicas balance by load), and what is unusual about it. Shards no replica has taken yet do not exist, and are not shown."),
      el("div", { class: "grid", id: "grid" }, ...cells),
      el("h2", {}, "Misplaced"),
      misplaced.length ? el("ul", { id: "misplaced" }, ...misplaced.map(s => el("li", {}, "shard " + s.name + ": " + (s.owner || "free") + (s.handing_to ? " → " + s.handing_to : "") + ", plan: " + (s.planned || "nobody"))))
        : el("p", { id: "misplaced" }, "None."),
      el("h2", {}, "Recent moves"),
      el("p", { class: "muted" }, "From the shards' recorded terms (each keeps its latest 8): a term whose holder is not the previous one's."),
      moves.length ? table([{ text: "when (new owner's clock)" }, { text: "shard" }, { text: "from" }, { text: "to" }, { text: "epoch", num: true },
        { text: "why (hand-ons: join, load, hot, list, zone; new shard, taken after a stop or an expired lease, added again, removed)" }], moves, { id: "moves" })
        : el("p", {}, "None recorded."),
    ];
  }

  // Queue and candidates: a fair lock's waiters (first in line first; one
  // passed over keeps its place, marked missed), and the place for leader
  // candidates.
  function renderQueue(q) {
    const rows = (q || []).map(w => el("tr", { "data-waiter": w.identity }, el("td", { class: "num" }, String(w.position)), el("td", {}, w.identity),
      el("td", {}, w.since ? stamp(w.since) + " (" + ago(w.since) + ")" : "—"), el("td", { "data-state": w.state || "waiting" }, w.state || "")));
    return [el("h2", {}, "Queue"), rows.length ? table([{ text: "#", num: true }, { text: "waiter" }, { text: "waiting since" }, { text: "" }], rows, { id: "queue" })
      : el("p", { class: "muted", id: "queue" }, "No waiters.")];
  }

  // An election's candidates, best first as the leader ranks them. A
  // candidate whose instance stopped writing its candidacy (crashed, hung,
  // cut off) is gone: said so with when it was last seen, greyed and struck
  // through, and never shown as standby or successor. At most one candidate
  // is marked: the one the leader is handing over to, else its standby.
  function candidateState(c) {
    if (c.gone) return c.refreshed ? "gone (last seen " + ago(c.refreshed) + ")" : "gone";
    if (c.stopping) return "stopping";
    return c.ready ? "ready" : "not ready";
  }

  function candidateRoles(cs) {
    const live = cs.filter(c => !c.gone);
    const succ = live.find(c => c.acknowledged) || live.find(c => c.designated);
    if (succ) return { who: succ.identity, role: succ.acknowledged ? "successor" : "designated", text: succ.acknowledged ? "designated successor, ready to take over" : "designated successor" };
    const standby = live.find(c => c.standby);
    if (standby) return { who: standby.identity, role: "standby", text: "standby" };
    return { who: null };
  }

  function renderCandidates(cs, leader) {
    cs = cs || [];
    const mark = candidateRoles(cs);
    const rows = cs.map(c => {
      const role = c.identity === mark.who ? mark.role : "";
      const leads = !c.gone && !role && leader && c.identity === leader;
      const state = c.gone ? "gone" : c.stopping ? "stopping" : c.ready ? "ready" : "not-ready";
      return el("tr", { class: "cand cand-" + state + (role ? " cand-marked" : ""), "data-candidate": c.identity, "data-state": state, "data-role": role },
        el("td", {}, c.identity),
        el("td", { class: "num" }, String(c.priority)),
        el("td", { class: "cstate" }, c.gone ? el("span", { class: "badge state-gone", title: "stopped writing its candidacy: crashed, hung or cut off from storage" + (c.refreshed ? "; last written " + stamp(c.refreshed) + " (storage's clock)" : "") }, candidateState(c)) : candidateState(c)),
        el("td", { class: "role", "data-leads": leads ? "true" : null }, role ? el("span", { class: "badge role-" + role }, mark.text) : leads ? "leader" : ""),
        el("td", {}, Object.entries(c.labels || {}).map(([k, v]) => k + "=" + v).join(", ")),
        el("td", {}, c.since ? stamp(c.since) : "—"));
    });
    const gone = cs.filter(c => c.gone).length;
    return [el("h2", {}, "Candidates"),
      el("p", { class: "muted" }, "Best first, as the leader ranks them. The standby is the one the leader keeps ready to take over: it looks at the lease " +
        "five times as often as the others. A designated successor is the one the leader is handing over to now. A gone candidate stopped writing its candidacy for a lease duration " +
        "(crashed, hung or cut off): no leader hands over to it, and the leader forgets it after 5 minutes."),
      rows.length ? table([{ text: "candidate" }, { text: "priority", num: true }, { text: "state" }, { text: "role" }, { text: "labels" }, { text: "started (its clock)" }], rows, { id: "candidates", "data-gone": String(gone) })
        : el("p", { class: "muted", id: "candidates" }, "No candidates recorded.")];
  }

  function renderBlobs(blobs) {
    const rows = blobs.map(b => el("tr", { "data-blob": b.name },
      el("td", { class: "mono" }, b.name), el("td", {}, b.kind_label), el("td", {}, stateBadge(b.state)),
      el("td", {}, b.holder || ""), el("td", { class: "num" }, b.epoch ? String(b.epoch) : ""),
      el("td", {}, b.since ? stamp(b.since) : ""), el("td", {}, releaseText(b.last_release))));
    return details("blobs", "Its " + blobs.length + " lock blobs",
      table([{ text: "blob" }, { text: "kind" }, { text: "state" }, { text: "holder" }, { text: "epoch", num: true }, { text: "since" }, { text: "last release" }], rows, { id: "blobs" }));
  }

  // --- reading ---

  async function tick() {
    let d = null;
    let status = 0;
    try {
      const r = await fetch(api, { cache: "no-store" });
      status = r.status;
      d = await r.json();
    } catch (e) {
      reads++;
      document.body.dataset.state = "ui-down";
      showProblem("azlease ui is not answering.", "The command serving this page stopped, or cannot be reached: " + e + ". Trying again every " + refreshMs / 1000 + " s; nothing below is shown until it answers.");
      setMain();
      document.getElementById("read").textContent = "no answer " + stamp(new Date().toISOString());
      return;
    }
    reads++;
    if (d && d.refresh_seconds) refreshMs = d.refresh_seconds * 1000;
    document.getElementById("api-link").href = api;
    if (d && d.storage) showRead(d);
    if (!d || !d.storage) {
      document.body.dataset.state = "error";
      showProblem("Unexpected answer " + status + ".", d && d.error ? d.error : "");
      setMain();
    } else if (!d.storage.ok) {
      document.body.dataset.state = "storage-" + d.storage.problem;
      const what = d.storage.problem === "refused" ? "Storage refuses to list the container" : "Storage cannot be reached";
      showProblem(what + (d.storage.failing_since ? " since " + stamp(d.storage.failing_since) + " (" + ago(d.storage.failing_since) + ")" : "") + ".",
        d.storage.error + " — Last successful read: " + (d.storage.last_success ? stamp(d.storage.last_success) : "none") +
        ". No data is shown until storage answers: what the last read showed may no longer be true.");
      setMain();
    } else if (isItem && !d.item) {
      document.body.dataset.state = "not-found";
      clearProblem();
      setMain(el("p", {}, link("/", "← every item")), el("h1", {}, "Not here now"),
        el("p", {}, "The read of " + stamp(d.read_at) + " has no such item: it may have been deleted, be of another kind, or lie outside the prefix."));
    } else {
      try {
        if (isItem) renderItem(d, d.item); else renderOverview(d);
        fitLabels();
        document.body.dataset.state = "ok";
        clearProblem();
        shownAt = Date.now();
        shownReadAt = d.read_at;
      } catch (e) {
        // A fault of this page's own must not stop it reading: say so,
        // show nothing, and try again at the next read.
        document.body.dataset.state = "page-error";
        showProblem("This page could not show the read of " + stamp(d.read_at) + ".", String(e) + " — Trying again every " + refreshMs / 1000 + " s; please report this.");
        setMain();
      }
    }
  }

  // Every read is followed by the next, whatever happened to this one.
  async function loop() {
    try {
      await tick();
    } finally {
      setTimeout(loop, refreshMs);
    }
  }

  // Data on screen that no answer has replaced for too long (a read that
  // hangs) is taken away, as a failed read's would be.
  setInterval(() => {
    if (document.body.dataset.state !== "ok" || !shownAt) return;
    const waited = Date.now() - shownAt;
    if (waited <= staleMs()) return;
    document.body.dataset.state = "waiting";
    showProblem("No answer for " + duration(waited) + ": azlease ui or storage is not answering.",
      "The last read was at " + stamp(shownReadAt) + "; nothing is shown until an answer comes: what it showed may no longer be true.");
    setMain();
  }, 1000);

  loop();
})();
