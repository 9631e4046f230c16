// logdx pages: keyboard navigation on lists, live rows on the failures list, small helpers.
// Everything essential works without this script (links and forms); it only adds comfort.
(function () {
  "use strict";

  function rows() { return Array.from(document.querySelectorAll("tr.nav-row")); }

  function select(row) {
    rows().forEach(function (r) { r.classList.remove("selected"); r.removeAttribute("aria-selected"); });
    if (!row) return;
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
    var link = row.querySelector("a.rowlink") || row.querySelector("a");
    if (link) link.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) {
      if (e.key === "Escape") t.blur();
      return;
    }
    var all = rows();
    var current = all.findIndex(function (r) { return r.classList.contains("selected"); });
    if (e.key === "j" || e.key === "ArrowDown" && current >= 0) {
      select(all[Math.min(all.length - 1, current + 1)]); e.preventDefault();
    } else if (e.key === "k" || e.key === "ArrowUp" && current >= 0) {
      select(all[Math.max(0, current - 1)]); e.preventDefault();
    } else if (e.key === "Enter" && current >= 0 && t === document.body) {
      window.location = all[current].dataset.href; e.preventDefault();
    } else if (e.key === "/") {
      var search = document.querySelector("[data-search]");
      if (search) { search.focus(); e.preventDefault(); }
    }
  });

  // Correcting a label needs a type: picking one selects "correct".
  document.querySelectorAll(".label-form select[name=error_type]").forEach(function (sel) {
    sel.addEventListener("change", function () {
      var radio = sel.form.querySelector("[data-correct]");
      if (sel.value && radio) radio.checked = true;
    });
  });

  var expand = document.querySelector("[data-expand-all]");
  if (expand) expand.addEventListener("click", function () {
    var folds = document.querySelectorAll("details.fold");
    var open = !Array.from(folds).every(function (d) { return d.open; });
    folds.forEach(function (d) { d.open = open; });
    expand.textContent = open ? "Collapse all folds" : "Expand all folds";
  });

  // New diagnoses appear at the top of the first page without a reload.
  var table = document.getElementById("failures");
  if (table && table.dataset.live === "1") {
    var live = document.getElementById("live");
    var latest = table.dataset.latest;
    var poll = function () {
      fetch(table.dataset.poll + "after=" + encodeURIComponent(latest), { credentials: "same-origin" })
        .then(function (resp) {
          if (resp.status === 401) { live.textContent = "Signed out — reload to sign in again."; return null; }
          if (!resp.ok) return null;
          latest = resp.headers.get("X-Latest-Diagnosis") || latest;
          return resp.text();
        })
        .then(function (html) {
          if (!html || !html.trim()) return;
          var tbody = table.tBodies[0];
          var holder = document.createElement("tbody");
          holder.innerHTML = html;
          var added = 0;
          Array.from(holder.rows).reverse().forEach(function (row) {
            // one row per job: a job whose diagnosis was pending is replaced by its diagnosed row
            var dup = tbody.querySelector('tr[data-href="' + row.dataset.href + '"]');
            if (dup) dup.remove();
            tbody.insertBefore(row, tbody.firstChild); added++;
          });
          if (added) live.textContent = added + " new diagnos" + (added === 1 ? "is" : "es") + " just arrived.";
        })
        .catch(function () { /* the next poll retries */ });
    };
    setInterval(poll, parseInt(table.dataset.interval || "5000", 10));
  }
  // Copy buttons: shown only with this script (without it the text is on the page to select).
  document.querySelectorAll("[data-copy], [data-copy-url], [data-copy-from]").forEach(function (btn) {
    btn.hidden = false;
    btn.addEventListener("click", function () {
      var text = btn.dataset.copy;
      if (btn.dataset.copyUrl) text = new URL(btn.dataset.copyUrl, window.location.href).href;
      if (btn.dataset.copyFrom) text = document.getElementById(btn.dataset.copyFrom).value;
      var label = btn.textContent;
      var done = function (msg) { btn.textContent = msg; setTimeout(function () { btn.textContent = label; }, 1500); };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(function () { done("Copied"); }, function () { done("Copy failed: select the text"); });
      } else { done("Copy failed: select the text"); }
    });
  });
  // Charts: drag across one to zoom to that window (the links above the charts do it without script).
  document.querySelectorAll("figure[data-zoomable] svg.metric").forEach(function (svg) {
    var help = document.querySelector(".brush-help");
    if (help) help.hidden = false;
    var d = svg.dataset, start = null, box = null;
    var toX = function (e) {
      var r = svg.getBoundingClientRect();
      var px = (e.clientX - r.left) * (+d.width / r.width);
      var f = Math.min(1, Math.max(0, (px - +d.padL) / +d.plotW));
      return { px: +d.padL + f * +d.plotW, x: +d.x0 + f * (+d.x1 - +d.x0) };
    };
    svg.addEventListener("mousedown", function (e) {
      start = toX(e); e.preventDefault();
      box = document.createElementNS("http://www.w3.org/2000/svg", "rect");
      box.setAttribute("class", "brush"); box.setAttribute("y", "0"); box.setAttribute("height", "100%");
      box.setAttribute("x", start.px); box.setAttribute("width", "0"); svg.appendChild(box);
    });
    svg.addEventListener("mousemove", function (e) {
      if (!start) return;
      var now = toX(e);
      box.setAttribute("x", Math.min(start.px, now.px)); box.setAttribute("width", Math.abs(now.px - start.px));
    });
    window.addEventListener("mouseup", function (e) {
      if (!start) return;
      var end = toX(e), a = Math.min(start.x, end.x), b = Math.max(start.x, end.x);
      start = null; if (box) box.remove();
      if (b - a < (+d.x1 - +d.x0) / 100) return;  // a click, not a drag
      var url = new URL(window.location.href);
      url.searchParams.set("zoom", Math.floor(a) + ":" + Math.ceil(b)); url.hash = "metrics";
      window.location = url.href;
    });
  });
})();
