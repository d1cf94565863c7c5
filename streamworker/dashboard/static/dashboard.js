// Live refresh: every data-refresh-ms, fetch this page's live part (the server renders only
// that block when it sees the X-Dashboard-Partial header) and swap it in. The HTML is rendered
// and escaped by the server; nothing from the page is evaluated.
//
// When a refresh fails (Redis gone, the dashboard gone), the old numbers stay but are dimmed,
// and a banner says how old they are and why: an operator must not read stale data as current.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var toggle = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");
  var stale = document.getElementById("stale");
  var every = parseInt(live.getAttribute("data-refresh-ms"), 10) || 3000;
  // When the data shown was read: the server's clock at render, then each good refresh.
  var dataAt = parseInt(live.getAttribute("data-data-at-ms"), 10) || Date.now();
  var busy = false;

  function stamp(text) { if (status) { status.textContent = text; } }

  function ago(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 120) { return s + " s"; }
    if (s < 7200) { return Math.round(s / 60) + " min"; }
    return Math.round(s / 3600) + " h";
  }

  function showStale(reason) {
    live.classList.add("stale-data");
    if (!stale) { return; }
    document.getElementById("stale-at").textContent = new Date(dataAt).toLocaleTimeString();
    document.getElementById("stale-age").textContent = ago(Date.now() - dataAt);
    document.getElementById("stale-error").textContent = reason;
    stale.hidden = false;
  }

  function fresh() {
    live.classList.remove("stale-data");
    if (stale) { stale.hidden = true; }
  }

  // The reason in an error page's body (its data-testid="error" line), parsed as inert HTML.
  function reasonOf(response, html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var line = doc.querySelector("[data-testid=error]");
    return (line ? line.textContent : "") || ("HTTP " + response.status);
  }

  function refresh() {
    if (busy || (toggle && !toggle.checked) || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, {
      headers: { "X-Dashboard-Partial": "1" },
      credentials: "same-origin",
      cache: "no-store"
    }).then(function (response) {
      if (response.redirected) {
        // The session ended (login page): show it as a whole page.
        window.location.reload();
        throw new Error("session ended");
      }
      return response.text().then(function (html) {
        if (!response.ok) { throw new Error(reasonOf(response, html)); }
        return html;
      });
    }).then(function (html) {
      live.innerHTML = html;
      dataAt = Date.now();
      live.setAttribute("data-refreshed", String(dataAt));
      fresh();
      stamp("updated " + new Date(dataAt).toLocaleTimeString());
    }).catch(function (err) {
      var reason = err.message === "Failed to fetch" ? "the dashboard does not answer" : err.message;
      showStale(reason);
      stamp("refresh failed");
    }).then(function () { busy = false; });
  }

  window.setInterval(refresh, every);
})();
