// spanbudget web UI: the overview refreshes its body in place; old `/#<trace id>` links
// (reports and alerts written before the trace pages existed) open the trace page.
"use strict";
(function () {
  const hash = window.location.hash.slice(1);
  if (/^[0-9a-fA-F]{32}$/.test(hash)) {
    window.location.replace("/traces/" + hash.toLowerCase());
    return;
  }
  document.addEventListener("DOMContentLoaded", function () {
    const box = document.getElementById("overview");
    const live = document.getElementById("live");
    const stamp = document.getElementById("refreshed");
    if (!box || !live) return;
    const every = 1000 * Number(live.dataset.refreshSeconds || 5);
    let on = true;
    let busy = false;
    live.addEventListener("click", function () {
      on = !on;
      live.setAttribute("aria-pressed", String(on));
      live.textContent = on ? "Live: on" : "Live: paused";
    });
    async function refresh() {
      // Never pull the page from under a keyboard user: wait while focus is inside it.
      if (!on || busy || document.hidden || box.contains(document.activeElement)) return;
      busy = true;
      try {
        const response = await fetch(box.dataset.bodyUrl, { headers: { Accept: "text/html" } });
        if (response.ok) {
          box.innerHTML = await response.text();
          stamp.textContent = "updated " + new Date().toLocaleTimeString();
          box.dataset.refreshes = String(Number(box.dataset.refreshes || 0) + 1);
        } else {
          stamp.textContent = "refresh failed: HTTP " + response.status;
        }
      } catch (error) {
        stamp.textContent = "refresh failed: collector unreachable";
      } finally {
        busy = false;
      }
    }
    window.setInterval(refresh, every);
  });
})();
