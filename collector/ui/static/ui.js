// spanbudget web UI: the overview refreshes its body in place; old `/#<trace id>` links
// (reports and alerts written before the trace pages existed) open the trace page; on a
// trace page, dragging across the waterfall's minimap zooms to that range (its links
// and the `view` query parameter do the same without a script).
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
  document.addEventListener("DOMContentLoaded", function () {
    const strip = document.getElementById("wf-minimap");
    if (!strip) return;
    const total = Number(strip.dataset.durationMs);
    const ns = "http://www.w3.org/2000/svg";
    let from = null;
    let shade = null;
    let dragged = false;
    function at(event) {
      const box = strip.getBoundingClientRect();
      return Math.min(1, Math.max(0, (event.clientX - box.left) / box.width));
    }
    function draw(a, b) {
      shade.setAttribute("x", String(1000 * Math.min(a, b)));
      shade.setAttribute("width", String(1000 * Math.abs(b - a)));
    }
    strip.addEventListener("pointerdown", function (event) {
      if (event.button !== 0) return;
      from = at(event);
      shade = document.createElementNS(ns, "rect");
      shade.setAttribute("class", "mm-drag");
      shade.setAttribute("y", "0");
      shade.setAttribute("height", "24");
      strip.appendChild(shade);
      draw(from, from);
      event.preventDefault(); // no text selection or link drag while dragging
    });
    window.addEventListener("pointermove", function (event) {
      if (from !== null) draw(from, at(event));
    });
    window.addEventListener("pointerup", function (event) {
      if (from === null) return;
      const to = at(event);
      const a = Math.min(from, to);
      const b = Math.max(from, to);
      from = null;
      shade.remove();
      // A click (no drag) is left to the stage links under it.
      if ((b - a) * strip.getBoundingClientRect().width < 4) return;
      dragged = true;
      const url = new URL(window.location.href);
      url.searchParams.set("view", (a * total).toFixed(3) + "-" + (b * total).toFixed(3));
      url.hash = "waterfall";
      window.location.assign(url.toString());
    });
    strip.addEventListener("click", function (event) {
      if (dragged) event.preventDefault(); // the drag zooms; the link it ended on does not
      dragged = false;
    }, true);
  });
})();
