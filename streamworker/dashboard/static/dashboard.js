// Live refresh: every data-refresh-ms, fetch this page's live part (the server renders only
// that block when it sees the X-Dashboard-Partial header) and swap it in. The HTML is rendered
// and escaped by the server; nothing from the page is evaluated.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var toggle = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");
  var every = parseInt(live.getAttribute("data-refresh-ms"), 10) || 3000;
  var busy = false;

  function stamp(text) { if (status) { status.textContent = text; } }

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
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text();
    }).then(function (html) {
      live.innerHTML = html;
      live.setAttribute("data-refreshed", String(Date.now()));
      stamp("updated " + new Date().toLocaleTimeString());
    }).catch(function (err) {
      stamp("refresh failed: " + err.message);
    }).then(function () { busy = false; });
  }

  window.setInterval(refresh, every);
})();
