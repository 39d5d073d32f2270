// The management view (admin key): domains and their versions, corpus uploads with the
// build job's progress, activate, roll back, delete, fold live edits.

import { $, POLL_MS, api, confirmAction, element, formatTime, say, show, sleep, state } from "./core.js";
import { loadInfo } from "./translate.js";

// --- management ---------------------------------------------------------------------------

const domainPath = (domain, tail = "") => `/v1/domains/${encodeURIComponent(domain)}${tail}`;

export async function loadDomains() {
  const error = $("domains-error");
  try {
    const data = await api("/v1/domains");
    state.domains = data.domains;
    show(error, "");
  } catch (e) {
    show(error, e.message);
    return;
  }
  const list = $("domain-list");
  list.replaceChildren(...state.domains.map(domainCard));
  if (!state.domains.length) list.append(element("p", { class: "hint", text: "No domain yet." }));
}

function fact(term, value) {
  return element("div", {}, element("dt", { text: term }), element("dd", { text: value }));
}

function attemptText(a) {
  if (!a) return "none";
  const when = formatTime(a.at);
  return a.ok ? `${a.version} activated ${when}` : `${a.version} failed ${when}: ${a.error}`;
}

function editsText(e) {
  if (!e.seq) return "none";
  const pending = e.pending ? `${e.pending} not folded (+${e.added} −${e.removed} pairs)` : "all folded";
  return `${e.seq} edit${e.seq === 1 ? "" : "s"}, ${pending}${e.bad_lines.length ? `, ${e.bad_lines.length} refused` : ""}`;
}

/** A size in bytes for people: 980 B, 12.3 KiB, 140 KiB, 2.1 MiB. */
export function humanBytes(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  if (i === 0) return `${n} B`;
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** The cells of a version's row after its state: pairs and method, size on disk, when it was
 * built (and, for a fold, from which version and through which edit). `info`: its entry of
 * `version_info`; absent from an older service, then only the pairs this page knows. */
function versionCells(d, v, info) {
  if (!info) {
    const pairs = v === d.active_version && d.pairs !== null ? d.pairs : state.sizes.get(v);
    const size = pairs === undefined ? "" : `${pairs} pairs${v === d.active_version ? ", " + d.method : ""}`;
    return [element("td", { class: "pairs", text: size }), element("td", { class: "size" }), element("td", { class: "built" })];
  }
  const pairs = typeof info.pairs === "number" ? `${info.pairs} pairs` : "– pairs";
  const method = info.method ? element("span", { class: "hint", text: info.method }) : null;
  const folded = info.folded_from
    ? element("span", {
        class: "hint folded",
        text: `folded from ${info.folded_from} through edit ${info.edits_through}`,
      })
    : null;
  const built = info.built_at
    ? element("time", { datetime: info.built_at, text: formatTime(info.built_at) })
    : document.createTextNode("–");
  const signed = info.signed ? element("span", { class: "badge signed", text: "signed" }) : null;
  return [
    element("td", { class: "pairs" }, pairs, method),
    element("td", { class: "size", title: `${info.size_bytes} bytes` }, humanBytes(info.size_bytes), signed),
    element("td", { class: "built" }, built, folded),
  ];
}

function domainCard(d) {
  const loaded = new Map(d.loaded.map((l) => [l.version, l]));
  const infos = new Map((d.version_info || []).map((i) => [i.version, i]));
  const rows = d.versions
    .slice()
    .sort()
    .reverse()
    .map((v) => {
      const badges = [];
      if (v === d.active_version) badges.push(element("span", { class: "badge active", text: "active" }));
      if (v === d.previous_version) badges.push(element("span", { class: "badge previous", text: "previous" }));
      if (loaded.has(v) && v !== d.active_version) {
        badges.push(element("span", { class: "badge inactive", text: `loaded, ${loaded.get(v).leases} leases` }));
      }
      const buttons = element("div", { class: "buttons" });
      if (v !== d.active_version) {
        buttons.append(
          element("button", {
            type: "button",
            class: "small",
            text: "Activate",
            "aria-label": `Activate ${d.domain} version ${v}`,
            "data-action": "activate",
            onclick: () => activate(d.domain, v),
          }),
          element("button", {
            type: "button",
            class: "danger small",
            text: "Delete",
            "aria-label": `Delete ${d.domain} version ${v}`,
            "data-action": "delete",
            onclick: () => deleteVersion(d.domain, v),
          }),
        );
      }
      return element(
        "tr",
        { "data-version": v },
        element("td", { class: "version", text: v }),
        element("td", { class: "state" }, ...badges),
        ...versionCells(d, v, infos.get(v)),
        element("td", {}, buttons),
      );
    });
  const rollbackButton = element("button", {
    type: "button",
    class: "secondary small",
    text: "Roll back",
    "aria-label": `Roll ${d.domain} back to ${d.previous_version || "its previous version"}`,
    disabled: !d.previous_version,
    onclick: () => rollback(d.domain, d.previous_version),
  });
  const edits = d.edits || null;
  const foldButton =
    edits && d.active_version
      ? element("button", {
          type: "button",
          class: "secondary small",
          text: "Fold edits into a new version",
          disabled: !edits.pending,
          "data-action": "fold",
          onclick: () => fold(d.domain, edits.pending),
        })
      : null;
  return element(
    "article",
    { class: "domain", "data-domain": d.domain, "aria-labelledby": `domain-${d.domain}` },
    element(
      "div",
      { class: "domain-head" },
      element("h4", { id: `domain-${d.domain}`, text: d.domain }),
      element("span", { class: `badge ${d.state}`, "data-state": d.state, text: d.state }),
      d.versions.length ? rollbackButton : null,
      foldButton,
    ),
    element(
      "dl",
      { class: "facts" },
      fact("Active", d.active_version || "none"),
      fact("Pairs", d.pairs === null ? "–" : String(d.pairs)),
      fact("Method", d.method || "–"),
      fact("Previous", d.previous_version || "none"),
      fact("Last activation", attemptText(d.last_attempt)),
      edits ? fact("Live edits", editsText(edits)) : null,
    ),
    d.versions.length
      ? element(
          "table",
          { class: "table versions" },
          element("caption", { class: "visually-hidden", text: `Versions of ${d.domain}` }),
          element(
            "thead",
            {},
            element(
              "tr",
              {},
              element("th", { scope: "col", text: "Version" }),
              element("th", { scope: "col", text: "State" }),
              element("th", { scope: "col", text: "Pairs" }),
              element("th", { scope: "col", text: "On disk" }),
              element("th", { scope: "col", text: "Built" }),
              element("th", { scope: "col" }, element("span", { class: "visually-hidden", text: "Actions" })),
            ),
          ),
          element("tbody", {}, ...rows),
        )
      : element("p", { class: "hint", text: "No version on disk." }),
  );
}

async function manageCall(question, call, done) {
  if (question && !(await confirmAction(question))) return;
  const status = $("domains-status");
  say(status, "Working…");
  show($("domains-error"), "");
  let message = "";
  let failure = "";
  try {
    message = done(await call());
  } catch (e) {
    failure = e.message;
  }
  await Promise.all([loadDomains(), loadInfo()]);
  say(status, message, true);
  if (failure) show($("domains-error"), failure);
}

export function activate(domain, version) {
  return manageCall(
    `Activate version ${version} of ${domain}? Every replica switches to it.`,
    () => api(domainPath(domain, "/activate"), { method: "POST", json: { version }, admin: true }),
    (d) => `${d.domain}: version ${d.active_version} active.`,
  );
}

function rollback(domain, previous) {
  return manageCall(
    `Roll ${domain} back to version ${previous}?`,
    () => api(domainPath(domain, "/rollback"), { method: "POST", admin: true }),
    (d) => `${d.domain}: rolled back to ${d.active_version}.`,
  );
}

function deleteVersion(domain, version) {
  return manageCall(
    `Delete version ${version} of ${domain}? Its files are removed from disk.`,
    () => api(domainPath(domain, `/versions/${encodeURIComponent(version)}`), { method: "DELETE", admin: true }),
    (d) => `${d.domain}: deleted ${d.deleted}.`,
  );
}

async function fold(domain, pending) {
  if (!(await confirmAction(`Build a new version of ${domain} with its ${pending} live edits folded in?`))) {
    return;
  }
  show($("upload-error"), "");
  try {
    const job = await api(domainPath(domain, "/memory/fold"), { method: "POST", admin: true });
    $("job").scrollIntoView({ block: "center" });
    await watchJob(job);
  } catch (e) {
    show($("domains-error"), e.message);
  }
}

export async function upload(event) {
  event.preventDefault();
  const error = $("upload-error");
  show(error, "");
  const domain = $("upload-domain").value.trim();
  const form = new FormData();
  form.append("file", $("upload-file").files[0]);
  if ($("upload-target").files[0]) form.append("target_file", $("upload-target").files[0]);
  if ($("upload-format").value) form.append("format", $("upload-format").value);
  form.append("method", $("upload-method").value);
  const widths = $("upload-widths").value.trim();
  if (widths && $("upload-method").value !== "idf-sentence") form.append("widths", widths);
  const send = $("upload-send");
  send.disabled = true;
  try {
    const job = await api(domainPath(domain, "/corpora"), { method: "POST", form, admin: true });
    await watchJob(job);
  } catch (e) {
    show(error, e.message);
  } finally {
    send.disabled = false;
  }
}

async function watchJob(job) {
  const box = $("job");
  const bar = $("job-progress");
  const status = $("job-status");
  const activateButton = $("job-activate");
  box.hidden = false;
  box.dataset.state = job.state;
  activateButton.hidden = true;
  $("job-label").textContent = `Build of ${job.domain} (${job.method}), job ${job.id}`;
  for (;;) {
    bar.value = job.progress;
    box.dataset.state = job.state;
    say(status, `${job.state}: ${job.message || ""} (${Math.round(job.progress * 100)}%)`, job.state === "done");
    if (job.state === "done" || job.state === "failed") break;
    await sleep(POLL_MS);
    job = await api(`/v1/jobs/${encodeURIComponent(job.id)}`, { admin: true });
  }
  if (job.state === "failed") {
    show($("upload-error"), `The build failed: ${job.error}`);
  } else if (job.result && job.result.version) {
    if (typeof job.result.pairs === "number") state.sizes.set(job.result.version, job.result.pairs);
    activateButton.hidden = false;
    activateButton.dataset.domain = job.domain;
    activateButton.dataset.version = job.result.version;
  }
  await Promise.all([loadDomains(), loadInfo()]);
}
