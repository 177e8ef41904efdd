// Drives the system Chromium with playwright-core for the web UI tests: one JSON command a
// line on stdin, one JSON answer a line on stdout. Console errors and page errors of the
// current page are collected and handed over by `errors`.
"use strict";
const readline = require("readline");
const { chromium } = require("playwright-core");

async function main() {
  const [executablePath, profile] = process.argv.slice(2);
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  const failed = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("requestfailed", (r) => failed.push(r.url()));
  page.on("response", (r) => { if (r.status() >= 400) failed.push(r.status() + " " + r.url()); });
  const ops = {
    async goto(c) { const r = await page.goto(c.url, { waitUntil: "load" }); return { status: r ? r.status() : null, url: page.url() }; },
    async eval(c) { return { value: await page.evaluate(c.js) }; },
    async click(c) {
      await Promise.all([c.navigates ? page.waitForEvent("load") : Promise.resolve(), page.click(c.selector)]);
      return { url: page.url() };
    },
    async select(c) { await page.selectOption(c.selector, c.value); return {}; },
    async fill(c) { await page.fill(c.selector, c.value); return {}; },
    async press(c) {
      await Promise.all([c.navigates ? page.waitForEvent("load") : Promise.resolve(), page.keyboard.press(c.key)]);
      return { url: page.url() };
    },
    async focused() { return { value: await page.evaluate(() => { const e = document.activeElement; return e ? { tag: e.tagName, text: (e.textContent || "").trim().slice(0, 80), href: e.getAttribute("href"), cls: e.getAttribute("class") } : null; }) }; },
    async screenshot(c) { await page.screenshot({ path: c.path, fullPage: !!c.fullPage }); return {}; },
    async scheme(c) { await page.emulateMedia({ colorScheme: c.value }); return {}; },
    async viewport(c) { await page.setViewportSize({ width: c.width, height: c.height }); return {}; },
    // Polled from here, not with waitForFunction: that evaluates its string inside the page,
    // which the pages' content security policy (no eval) rightly refuses.
    async wait(c) {
      const deadline = Date.now() + (c.timeout || 15000);
      for (;;) {
        try { if (await page.evaluate(c.js)) return {}; } catch (error) { /* navigating */ }
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${c.js}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async errors() { const out = { errors: errors.splice(0), failed: failed.splice(0) }; return out; },
    async close() { await context.close(); return { closed: true }; },
  };
  const lines = readline.createInterface({ input: process.stdin });
  process.stdout.write(JSON.stringify({ ready: true, version: context.browser() ? context.browser().version() : "" }) + "\n");
  for await (const line of lines) {
    const command = JSON.parse(line);
    let answer;
    try {
      answer = { ok: true, ...(await ops[command.op](command)) };
    } catch (error) {
      answer = { ok: false, error: String(error && error.stack || error) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
    if (command.op === "close") break;
  }
  process.exit(0);
}
main().catch((error) => { process.stdout.write(JSON.stringify({ ready: false, error: String(error) }) + "\n"); process.exit(1); });
