// Opens the dashboard at URL in headless Chromium (Debian's) with
// Playwright, RUNS times in fresh pages, and prints one line of JSON: each
// run's milliseconds from navigation start to the page's first drawing of
// the report (the page's own `data-first-render-ms`, real time).
//
//   node benches/dashboard/render.mjs URL [RUNS]
import { chromium } from "playwright-core";

const [url, runs = "5"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const timings = [];
for (let i = 0; i < Number(runs); i++) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.firstRenderMs !== undefined, null, { timeout: 30000 });
  timings.push(Number(await page.evaluate(() => document.body.dataset.firstRenderMs)));
  await page.close();
}
await browser.close();
console.log(JSON.stringify({ first_render_ms: timings }));
