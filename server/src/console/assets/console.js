// The operator console's page. Plain JavaScript, no library.
//
// Every value from the store or the service (tenant ids, plan and limit names, keys, who
// made a change) is user input: it is only ever written with textContent or as an
// attribute value through the DOM, never parsed as HTML. Links to a tenant are in-page
// fragments (#/tenant/...), never a URL taken from data.
"use strict";

const state = {
  user: null,
  role: null,
  csrf: null,
  tenant: null,
  pending: null, // the change previewed: {verb, body, version}
  timers: [],
};

const $ = (id) => document.getElementById(id);

// An element with text and attributes; children appended (strings become text nodes).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

function tenantLink(tenant) {
  return el("a", { href: "#/tenant/" + encodeURIComponent(tenant), class: "id tenant-link" }, tenant);
}

function say(text, kind) {
  const box = $("message");
  box.textContent = text || "";
  box.className = kind || "";
}

function fillBody(table, rows) {
  const body = $(table).tBodies[0];
  body.replaceChildren(...rows);
}

function whenText(instant) {
  return instant ? instant.utc : "";
}

// Calls the API: JSON in and out; a write carries the CSRF token.
async function api(path, body) {
  const options = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    if (state.csrf) options.headers["X-CSRF-Token"] = state.csrf;
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let answer = null;
  try {
    answer = await response.json();
  } catch (_) {
    answer = { detail: "the console answered " + response.status };
  }
  if (!response.ok) {
    const error = new Error(answer.detail || response.statusText);
    error.status = response.status;
    throw error;
  }
  return answer;
}

function failed(error) {
  if (error.status === 401) {
    showLogin();
    return;
  }
  say(error.message, "error");
}

// ---- signing in ----

function showLogin() {
  state.user = null;
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  for (const page of document.querySelectorAll("section[id^=page-]")) page.hidden = true;
  $("login").hidden = false;
}

async function signedIn(session) {
  state.user = session.user;
  state.role = session.role;
  state.csrf = session.csrf;
  $("who").textContent = session.user + " (" + session.role + ")";
  if (session.role !== "editor") {
    // A viewer has no edit controls at all (the API refuses their writes anyway).
    for (const node of document.querySelectorAll(".editor-only")) node.remove();
    document.body.classList.add("viewer");
  }
  $("login").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = false;
  route();
}

async function start() {
  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const session = await api("/admin/login", { token: $("login-token").value });
      $("login-token").value = "";
      say("", "");
      await signedIn(session);
    } catch (error) {
      say(error.message, "error");
    }
  });
  $("logout").addEventListener("click", async () => {
    try {
      await api("/admin/logout", {});
    } catch (_) {
      // Signed out either way.
    }
    location.reload();
  });
  wireForms();
  window.addEventListener("hashchange", route);
  try {
    await signedIn(await api("/admin/v1/session"));
  } catch (error) {
    if (error.status === 401) showLogin();
    else say(error.message, "error");
  }
}

// ---- pages ----

function stopTimers() {
  for (const timer of state.timers) clearInterval(timer);
  state.timers = [];
}

function every(ms, fn) {
  fn();
  state.timers.push(setInterval(fn, ms));
}

function route() {
  if (!state.user) return;
  stopTimers();
  const hash = location.hash || "#/tenant";
  const [, page, ...rest] = hash.split("/");
  const name = ["tenant", "plans", "throttled", "health"].includes(page) ? page : "tenant";
  for (const section of document.querySelectorAll("section[id^=page-]")) {
    section.hidden = section.id !== "page-" + name;
  }
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("current", link.id === "nav-" + name);
  }
  if (name === "tenant") {
    const tenant = rest.length ? decodeURIComponent(rest.join("/")) : null;
    showTenant(tenant);
  } else if (name === "plans") {
    loadPlans();
  } else if (name === "throttled") {
    every(3000, loadThrottled);
  } else if (name === "health") {
    every(3000, loadHealth);
  }
}

// ---- tenant ----

async function searchTenants() {
  const query = $("tenant-search").value.trim();
  try {
    const found = await api("/admin/v1/tenants?q=" + encodeURIComponent(query));
    const items = found.tenants.map((row) =>
      el("li", {}, tenantLink(row.tenant), row.plan ? " (" + row.plan + ")" : ""));
    if (found.more) items.push(el("li", { class: "muted" }, "and " + found.more + " more"));
    if (!items.length) items.push(el("li", { class: "muted" }, "no tenant the store names matches"));
    $("tenant-results").replaceChildren(...items);
  } catch (error) {
    failed(error);
  }
}

function overrideRows(overrides, withDelete) {
  return overrides.map((entry) => {
    const cells = [
      el("td", { class: "id" }, entry.field),
      el("td", {}, entry.limits.join(" ")),
      el("td", {}, entry.expires ? entry.expires.utc : "always"),
      el("td", {}, entry.live ? "yes" : "expired"),
    ];
    if (withDelete && state.role === "editor") {
      const button = el("button", { type: "button", class: "danger override-delete" }, "Delete");
      button.addEventListener("click", () => {
        const [pattern, limit] = splitField(entry.field);
        preview("override/delete", { pattern, limit });
      });
      cells.push(el("td", {}, button));
    }
    return el("tr", {}, ...cells);
  });
}

function splitField(field) {
  const space = field.indexOf(" ");
  return space < 0 ? [field, null] : [field.slice(0, space), field.slice(space + 1)];
}

function historyRows(entries) {
  return entries.map((entry) =>
    el("tr", { class: "audit" },
      el("td", {}, "v" + entry.version),
      el("td", {}, whenText(entry.at)),
      el("td", { class: "who" }, entry.who),
      el("td", {}, entry.op),
      el("td", { class: "id" }, entry.kind + " " + entry.name),
      el("td", {}, entry.old || "(none)"),
      el("td", {}, entry.new || "(none)")));
}

async function showTenant(tenant) {
  if (!tenant) {
    $("tenant-detail").hidden = true;
    return;
  }
  state.tenant = tenant;
  $("tenant-search").value = tenant;
  try {
    const answer = await api("/admin/v1/tenant?tenant=" + encodeURIComponent(tenant));
    $("tenant-name").textContent = answer.tenant;
    $("tenant-plan").textContent = answer.plan || "none (each policy's defaults)";
    $("tenant-version").textContent = String(answer.version);
    $("tenant-replica-version").textContent =
      answer.replica_version === null ? "(none: no limit uses plans)" : String(answer.replica_version);
    fillBody("tenant-effective", answer.effective.map((limit) =>
      el("tr", {}, el("td", { class: "id" }, limit.limit), el("td", {}, limit.rule.text))));
    if (!answer.effective.length) {
      fillBody("tenant-effective", [el("tr", {}, el("td", { colspan: "2", class: "muted" },
        "no limits from the store: each policy's defaults apply"))]);
    }
    fillBody("tenant-overrides", overrideRows(answer.overrides, true));
    const select = $("tenant-plan-select");
    if (select) {
      select.replaceChildren(...answer.plans.map((plan) => el("option", { value: plan }, plan)));
      if (answer.plan) select.value = answer.plan;
    }
    $("tenant-detail").hidden = false;
    const history = await api("/admin/v1/history?count=20&tenant=" + encodeURIComponent(tenant));
    fillBody("tenant-history", historyRows(history.entries));
  } catch (error) {
    failed(error);
    return;
  }
  every(2000, () => loadUsage(tenant));
}

function duration(ms) {
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms / 60000) + " min";
}

async function loadUsage(tenant) {
  if (state.tenant !== tenant) return;
  try {
    const usage = await api("/admin/v1/usage?tenant=" + encodeURIComponent(tenant));
    const rows = usage.limits.map((row) => {
      let remaining = "";
      let quota = "";
      let reset = "";
      if (row.per_value) remaining = "one counter per value of '" + row.per_value + "'";
      else if (row.blocked) remaining = "0 (blocked)";
      else if (row.error) remaining = row.error;
      else {
        remaining = String(row.remaining);
        quota = String(row.quota);
        reset = duration(row.reset_ms);
      }
      return el("tr", { class: "usage", dataset: { limit: row.limit, domain: row.domain } },
        el("td", {}, row.domain),
        el("td", { class: "id" }, row.rule),
        el("td", { class: "id" }, row.limit),
        el("td", { class: "num remaining" }, remaining),
        el("td", { class: "num quota" }, quota),
        el("td", { class: "num" }, reset),
        el("td", {}, row.source),
        el("td", { class: "key" }, row.key || ""));
    });
    if (!rows.length) {
      rows.push(el("tr", {}, el("td", { colspan: "8", class: "muted" },
        "no limit of this service's config takes its value from the policy store (tenant_key)")));
    }
    fillBody("tenant-usage", rows);
    $("tenant-usage-at").textContent = "read " + new Date().toLocaleTimeString();
  } catch (error) {
    failed(error);
  }
}

// ---- plans, tenants, overrides ----

async function loadPlans() {
  try {
    const store = await api("/admin/v1/list");
    $("plans-version").textContent = String(store.version);
    fillBody("plans-table", store.plans.map((plan) => {
      const cells = [
        el("td", { class: "id" }, plan.name),
        el("td", {}, plan.limits.join(" ")),
        el("td", { class: "num" }, String(plan.tenants)),
      ];
      if (state.role === "editor") {
        const edit = el("button", { type: "button", class: "quiet plan-edit" }, "Edit");
        edit.addEventListener("click", () => {
          $("plan-name").value = plan.name;
          $("plan-limits").value = plan.limits.join("\n");
          $("plan-name").focus();
        });
        const remove = el("button", { type: "button", class: "danger plan-delete" }, "Delete");
        remove.addEventListener("click", () => preview("plan/delete", { name: plan.name }));
        cells.push(el("td", {}, edit, " ", remove));
      }
      return el("tr", {}, ...cells);
    }));
    fillBody("tenants-table", store.tenants.map((row) =>
      el("tr", {}, el("td", {}, tenantLink(row.tenant)), el("td", { class: "id" }, row.plan))));
    fillBody("overrides-table", overrideRows(store.overrides, true));
    const select = $("tenant-set-plan");
    if (select) select.replaceChildren(...store.plans.map((plan) => el("option", { value: plan.name }, plan.name)));
    const history = await api("/admin/v1/history?count=50");
    fillBody("history-table", historyRows(history.entries));
  } catch (error) {
    failed(error);
  }
}

function words(text) {
  return text.split(/\s+/).filter((word) => word.length);
}

function wireForms() {
  $("tenant-search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = $("tenant-search").value.trim();
    searchTenants();
    if (query) location.hash = "#/tenant/" + encodeURIComponent(query);
  });
  $("export-button").addEventListener("click", async () => {
    try {
      $("export-text").textContent = (await api("/admin/v1/export")).toml;
    } catch (error) {
      failed(error);
    }
  });
  $("throttled-minutes").addEventListener("change", loadThrottled);
  $("preview-cancel").addEventListener("click", () => {
    state.pending = null;
    $("preview").hidden = true;
  });
  $("preview-apply").addEventListener("click", apply);
  const on = (id, fn) => {
    const form = $(id);
    if (form) form.addEventListener("submit", (event) => { event.preventDefault(); fn(); });
  };
  on("tenant-plan-form", () =>
    preview("tenant/set", { tenant: state.tenant, plan: $("tenant-plan-select").value }));
  on("tenant-override-form", () => preview("override/set", {
    pattern: state.tenant,
    limits: words($("tenant-override-limits").value),
    ttl: $("tenant-override-ttl").value.trim() || null,
    all: $("tenant-override-all").checked,
    add: $("tenant-override-add").checked,
  }));
  on("plan-form", () => preview("plan/set", {
    name: $("plan-name").value.trim(),
    limits: words($("plan-limits").value),
    replace: $("plan-replace").checked,
  }));
  on("tenant-set-form", () => preview("tenant/set", {
    tenant: $("tenant-set-tenant").value.trim(),
    plan: $("tenant-set-plan").value,
  }));
  on("override-form", () => preview("override/set", {
    pattern: $("override-pattern").value.trim(),
    limits: words($("override-limits").value),
    ttl: $("override-ttl").value.trim() || null,
    all: $("override-all").checked,
    add: $("override-add").checked,
  }));
}

// A change is previewed first (the edits and the tenants it moves), then applied at the
// version previewed: if the store moved meanwhile, the apply is refused (409), not merged.
async function preview(verb, body) {
  try {
    const answer = await api("/admin/v1/" + verb, Object.assign({}, body, { dry_run: true }));
    state.pending = { verb, body, version: answer.from_version };
    $("preview-op").textContent = answer.op;
    $("preview-summary").textContent = answer.edits.length
      ? "At store version " + answer.from_version + ", " + answer.edits.length + " field(s) change." +
        (answer.note ? " " + answer.note + "." : "") + (answer.warning ? " Warning: " + answer.warning : "")
      : "Nothing to change.";
    fillBody("preview-edits", answer.edits.map((edit) =>
      el("tr", {}, el("td", { class: "id" }, edit.kind + " " + edit.name),
        el("td", {}, edit.old === null ? "(none)" : edit.old),
        el("td", {}, edit.new === null ? "(deleted)" : edit.new))));
    const moved = answer.moved.tenants.map((tenant) =>
      el("tr", { class: "moved" }, el("td", {}, tenantLink(tenant.tenant)),
        el("td", {}, tenant.before.join(", ") || "defaults"),
        el("td", {}, tenant.after.join(", ") || "defaults")));
    if (answer.moved.more) moved.push(el("tr", {}, el("td", { colspan: "3" }, "and " + answer.moved.more + " more")));
    if (!moved.length) moved.push(el("tr", {}, el("td", { colspan: "3", class: "muted" }, "no tenant the store names")));
    fillBody("preview-moved", moved);
    $("preview-wildcards").textContent = answer.moved.wildcards.length
      ? "Also every tenant matching " + answer.moved.wildcards.join(", ") + ", named in the store or not."
      : "";
    $("preview-apply").disabled = !answer.edits.length;
    $("preview").hidden = false;
    say("", "");
  } catch (error) {
    failed(error);
  }
}

async function apply() {
  const pending = state.pending;
  if (!pending) return;
  try {
    const answer = await api("/admin/v1/" + pending.verb,
      Object.assign({}, pending.body, { dry_run: false, if_version: pending.version }));
    state.pending = null;
    $("preview").hidden = true;
    say(answer.op + ": version " + answer.from_version + " -> " + answer.version, "ok");
    route();
  } catch (error) {
    failed(error);
  }
}

// ---- throttled now ----

async function loadThrottled() {
  try {
    const minutes = $("throttled-minutes").value;
    const answer = await api("/admin/v1/top?count=10&minutes=" + encodeURIComponent(minutes));
    const blocks = answer.limits.map((limit) => {
      const share = Math.round(limit.top10_share * 100);
      const rows = limit.keys.map((key) =>
        el("tr", { class: "top-key" },
          el("td", { class: "key" }, key.key),
          el("td", { class: "num" }, String(key.count)),
          el("td", { class: "num" }, String(key.lower)),
          el("td", {}, key.tenant === null ? "" : tenantLink(key.tenant))));
      return el("div", { class: "throttled-limit" },
        el("h2", {}, limit.policy + " / " + limit.limit),
        el("p", {},
          String(limit.denials) + " denials; the top 10 keys take " + share + " % of them " +
          (share >= 50 ? "(concentrated: the limit works as intended)" : "(spread: is the limit set too low?)") +
          "; counts are at most " + limit.bound + " over the truth (" + limit.summaries + " summaries)."),
        el("table", {},
          el("thead", {}, el("tr", {}, el("th", {}, "key"), el("th", {}, "denied"),
            el("th", {}, "at least"), el("th", {}, "tenant"))),
          el("tbody", {}, ...rows)));
    });
    if (!blocks.length) blocks.push(el("p", { class: "muted" }, "no denial in this window"));
    $("throttled").replaceChildren(...blocks);
    $("throttled-at").textContent = "(read " + new Date().toLocaleTimeString() + ")";
  } catch (error) {
    failed(error);
  }
}

// ---- health ----

async function loadHealth() {
  try {
    const health = await api("/admin/v1/health");
    const row = (name, value, bad) =>
      el("tr", {}, el("th", {}, name), el("td", { class: bad ? "error" : "" }, value));
    const replica = health.plans.replica;
    const store = health.plans.store;
    fillBody("health-table", [
      row("store reachable", health.store.reachable ? "yes" : "no", !health.store.reachable),
      row("circuit breaker", health.store.breaker_open ? "open: every check goes to the fallback" : "closed",
        health.store.breaker_open),
      row("failure mode", health.store.failure_mode),
      row("decisions by the store", String(health.decisions.store)),
      row("decisions by the fallback", String(health.decisions.fallback) +
        (health.decisions.last_fallback ? " (last " + health.decisions.last_fallback.utc + ")" : ""),
        health.decisions.fallback > 0),
      row("config", "generation " + health.config.generation + ", fingerprint " + health.config.fingerprint +
        ", loaded " + health.config.loaded.utc),
      row("config domains", health.config.domains.join(", ")),
      row("policy store version", store.error ? store.error : String(store.version), Boolean(store.error)),
      row("this replica follows", replica ? replica.status : "no limit uses plans"),
    ]);
    const history = await api("/admin/v1/history?count=20");
    fillBody("health-history", historyRows(history.entries));
  } catch (error) {
    failed(error);
  }
}

document.addEventListener("DOMContentLoaded", start);
