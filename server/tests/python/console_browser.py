"""The operator console in a real browser: Debian's chromium, headless, driven by Selenium
through Debian's chromium-driver, against a real service, Redis and module (started by
tests/service/console.rs, which passes their addresses).

An editor creates a plan, moves a tenant onto it and adds a temporary override, each
previewed then applied in the page, and a check through the service answers with the new
limit within 1 s; the tenant's live usage drops after checks; a flooded key appears under
"Throttled now" linked to its tenant; the audit trail names the editor. Hostile input
(script in tenant ids, override patterns and keys) is shown as text and never runs; a page
of another origin forging POSTs with the editor's and the viewer's cookies changes nothing;
a viewer sees no edit control and is refused a write even with its own CSRF token.
Screenshots go to --screenshots.

Prints `RESULT {...}` (the edit-to-enforcement times) and `console browser test passed`.
"""

from __future__ import annotations

import argparse
import http.server
import json
import shutil
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

HOSTILE_TENANTS = [
    "<script>window.__pwned=1</script>",
    '"><img/src=x/onerror=window.__pwned=2>',
]
HOSTILE_PATTERN = "<svg/onload=window.__pwned=3>*"


def poll(what: str, condition: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """Polls until `condition` returns something true; fails naming `what`."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as error:  # a page mid-render: try again
            last_error = error
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error!r})")


class Api:
    """The service's HTTP API and the console's JSON API (with a bearer token)."""

    def __init__(self, http_url: str, admin_url: str, token: str) -> None:
        self.http_url = http_url
        self.admin_url = admin_url
        self.token = token

    def check(self, tenant: str, hits: int = 1) -> dict[str, Any]:
        descriptor: dict[str, Any] = {"entries": [{"key": "tenant", "value": tenant}]}
        if hits == 0:
            descriptor["hitsAddend"] = 0
        body = json.dumps({"domain": "api", "descriptors": [descriptor]}).encode()
        request = urllib.request.Request(
            self.http_url + "/v1/check",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as error:
            return dict(json.load(error))

    def admin(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.admin_url + path,
            data=data,
            headers={
                "Content-Type": "application/json",
                "Authorization": "Bearer " + self.token,
            },
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return dict(json.load(response))

    def version(self) -> int:
        return int(self.admin("/admin/v1/list")["version"])

    def limit_of(self, tenant: str) -> int:
        """The limit a check through the service applies to `tenant` (read, not charged)."""
        status = self.check(tenant, hits=0)["statuses"][0]
        return int(status["currentLimit"]["requestsPerUnit"])


def redis_command(port: int, *words: str) -> bytes:
    """One command to Redis in RESP (the test writes a top-keys summary with it)."""
    payload = f"*{len(words)}\r\n".encode()
    for word in words:
        data = word.encode()
        payload += f"${len(data)}\r\n".encode() + data + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(payload)
        reply = connection.recv(65536)
    assert not reply.startswith(b"-"), reply
    return reply


def start_browser() -> WebDriver:
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise SystemExit(
            "BROWSER MISSING: Debian's chromium and chromium-driver are needed "
            "(scripts/prereqs.sh installs them: apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-background-networking",
    ):
        options.add_argument(argument)
    # The driver's path given: Selenium Manager is never asked to download anything.
    return webdriver.Chrome(service=DriverService(executable_path=driver), options=options)


class Page:
    """The console in the browser."""

    def __init__(self, browser: WebDriver, admin_url: str, shots: Path) -> None:
        self.browser = browser
        self.admin_url = admin_url
        self.shots = shots

    def find(self, css: str) -> Any:
        return self.browser.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[Any]:
        return list(self.browser.find_elements(By.CSS_SELECTOR, css))

    def visible(self, css: str) -> Any:
        return poll(css + " visible", lambda: [e for e in self.all(css) if e.is_displayed()])

    def go(self, fragment: str) -> None:
        self.browser.get(self.admin_url + "/admin/" + fragment)

    def sign_in(self, token: str) -> None:
        self.browser.delete_all_cookies()
        self.go("")
        self.visible("#login-token")
        self.find("#login-token").send_keys(token)
        self.find("#login-submit").click()
        self.visible("#nav")

    def fill(self, css: str, text: str) -> None:
        field = self.find(css)
        field.clear()
        field.send_keys(text)

    def preview(self, button: str) -> Any:
        self.find(button).click()
        return self.visible("#preview")

    def apply(self, api: Api) -> float:
        """Clicks Apply and waits for the store's version to move; the instant it was
        clicked."""
        before = api.version()
        clicked = time.monotonic()
        self.find("#preview-apply").click()
        poll("the change applied", lambda: api.version() > before)
        poll("the page to say it", lambda: "version" in self.find("#message").text)
        return clicked

    def shot(self, name: str) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.browser.save_screenshot(str(self.shots / f"{name}.png"))

    def no_script_ran(self) -> None:
        try:
            alert = self.browser.switch_to.alert
            raise AssertionError(f"a script of the data ran: alert {alert.text!r}")
        except NoAlertPresentException:
            pass
        pwned = self.browser.execute_script("return window.__pwned === undefined ? null : window.__pwned")
        assert pwned is None, f"a hostile tenant id ran as script ({pwned})"
        for tag in ("img", "svg"):
            assert not self.all(tag), f"a hostile id became an <{tag}> element"


def attacker_site(admin_url: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A page of another origin (another port) forging writes to the console: a form posted
    as text/plain (a 'simple' request a browser sends with the cookie), and a script that
    tries a JSON fetch with the cookie (which needs a preflight the console never grants)."""
    target = admin_url + "/admin/v1/tenant/set"
    pages = {
        "/": f"""<!doctype html><html><head><title>free prizes</title>
<script src="/attack.js" defer></script></head><body>
<form id="forged" method="POST" action="{target}" enctype="text/plain">
<input type="hidden" name='{{"tenant":"acme","plan":"gold","x":"' value='"}}'>
<button id="forge" type="submit">claim</button></form>
<p id="fetch-result">pending</p></body></html>""",
        "/attack.js": f"""document.addEventListener("DOMContentLoaded", async () => {{
  const out = document.getElementById("fetch-result");
  try {{
    const response = await fetch({json.dumps(target)}, {{method: "POST", credentials: "include",
      headers: {{"Content-Type": "application/json"}},
      body: JSON.stringify({{tenant: "acme", plan: "gold"}})}});
    out.textContent = "answered " + response.status;
  }} catch (error) {{
    out.textContent = "blocked: " + error.name;
  }}
}});""",
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            kind = "text/javascript" if self.path.endswith(".js") else "text/html"
            self.send_header("Content-Type", kind + "; charset=utf-8")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def forged_posts_change_nothing(page: Page, api: Api, site: str, who: str) -> None:
    before = api.version()
    page.browser.get(site)
    result = poll(
        "the forged fetch to end",
        lambda: (lambda text: text if text != "pending" else None)(page.find("#fetch-result").text),
    )
    assert not result.startswith("answered 2"), f"{who}: the forged fetch got through: {result}"
    page.find("#forge").click()
    body = poll(
        "the console's answer to the forged form",
        lambda: page.browser.current_url.startswith(page.admin_url) and page.find("body").text,
    )
    assert "refused" in body or "Forbidden" in body, f"{who}: the forged form was not refused: {body}"
    assert api.version() == before, f"{who}: a forged POST changed the store"


def run(args: argparse.Namespace) -> dict[str, Any]:
    editor = Api(args.http, args.admin, args.editor_token)
    shots = Path(args.screenshots)
    browser = start_browser()
    page = Page(browser, args.admin, shots)
    results: dict[str, Any] = {}
    site_server, site = attacker_site(args.admin)
    try:
        # An editor signs in and creates a plan.
        page.sign_in(args.editor_token)
        page.go("#/plans")
        page.visible("#plan-form")
        page.fill("#plan-name", "gold")
        page.fill("#plan-limits", "per-minute=sliding:3/60s")
        preview = page.preview("#plan-preview")
        assert "plan set gold" in preview[0].text, preview[0].text
        page.apply(editor)
        assert editor.limit_of("acme") == 100, "acme is on no plan yet: the YAML default"

        # acme moved onto it from its tenant page: the preview names acme; enforced within 1 s.
        page.go("#/tenant/acme")
        page.visible("#tenant-detail")
        poll("the plan select", lambda: page.all("#tenant-plan-select option"))
        Select(page.find("#tenant-plan-select")).select_by_value("gold")
        page.preview("#tenant-plan-preview")
        moved = poll("acme in the preview", lambda: [r.text for r in page.all("#preview-moved tr.moved")])
        assert any(line.startswith("acme") and "sliding:3/1m" in line for line in moved), moved
        page.shot("console-preview")
        clicked = page.apply(editor)
        poll("a check answering acme's plan limit", lambda: editor.limit_of("acme") == 3, 5)
        plan_s = time.monotonic() - clicked

        # A temporary override, edited a few times: each enforced within 1 s of Apply.
        times = [plan_s]
        for amount in (7, 8, 9):
            page.go("#/tenant/acme")
            page.visible("#tenant-override-form")
            page.fill("#tenant-override-limits", f"per-minute=sliding:{amount}/60s")
            page.fill("#tenant-override-ttl", "10m")
            page.preview("#tenant-override-preview")
            poll("the override's preview", lambda: page.all("#preview-moved tr.moved"))
            clicked = page.apply(editor)
            poll(f"a check answering {amount}", lambda a=amount: editor.limit_of("acme") == a, 5)
            times.append(time.monotonic() - clicked)
        results["edit_to_enforcement_s"] = [round(t, 3) for t in times]
        assert max(times) < 1.0, f"a console edit took over 1 s to be enforced: {times}"

        # Live usage: two checks, and the page shows what the service says is left.
        page.go("#/tenant/acme")
        page.visible("#tenant-detail")
        answers = [editor.check("acme") for _ in range(2)]
        left = answers[-1]["statuses"][0]["limitRemaining"]
        usage = poll(
            "the live usage to show the checks",
            lambda: [
                row
                for row in page.all("#tenant-usage tr.usage")
                if row.find_element(By.CSS_SELECTOR, ".remaining").text == str(left)
            ],
            8,
        )
        assert usage[0].find_element(By.CSS_SELECTOR, ".quota").text == "9"
        key = usage[0].find_element(By.CSS_SELECTOR, ".key").text
        assert key == "rls:api:tenant=acme|plan:per-minute:sliding", key
        page.shot("console-tenant")

        # A flood: the service denies; the fleet's summary of it (issue 39's format v1, as
        # a replica's reporter writes it) shows under "Throttled now", linked to acme.
        denied = sum(1 for _ in range(15) if not editor.check("acme")["allowed"])
        assert denied > 0, "the flood was never denied"
        now = int(redis_command(args.redis_port, "TIME").split(b"\r\n")[2])
        bucket = now - now % 60
        summary = {
            "v": 1, "policy": "api", "limit": "per-minute", "replica": "0" * 32,
            "client": "rust", "capacity": 128, "denials": denied + 3, "floor": 0,
            "keys": [[key, denied, 0], ["rls:api:tenant=" + HOSTILE_TENANTS[1] + "|x", 3, 0]],
        }
        redis_command(
            args.redis_port, "HSET", f"rl:top:{{rl-top}}:v1:{bucket}",
            f"{'0' * 32}:3:api:per-minute", json.dumps(summary),
        )
        page.go("#/throttled")
        row = poll(
            "the flooded key under Throttled now",
            lambda: [r for r in page.all("#throttled tr.top-key") if r.text.startswith(key)],
        )[0]
        assert row.find_element(By.CSS_SELECTOR, "td.num").text == str(denied)
        page.shot("console-throttled")
        page.no_script_ran()
        row.find_element(By.CSS_SELECTOR, "a.tenant-link").click()
        poll("the tenant page from the throttled key", lambda: page.find("#tenant-name").text == "acme")

        # The audit trail names the editor.
        page.go("#/plans")
        audit = poll(
            "the audit line",
            lambda: [r.text for r in page.all("#history-table tr.audit") if "override set acme" in r.text],
        )
        assert "console:alice" in audit[0], audit[0]
        page.shot("console-plans")
        page.go("#/health")
        poll("the health table", lambda: "store reachable" in page.find("#health-table").text)
        assert "yes" in page.find("#health-table").text
        page.shot("console-health")

        # Hostile input: script in tenant ids and an override pattern, shown as text only.
        for tenant in HOSTILE_TENANTS:
            editor.admin("/admin/v1/tenant/set", {"tenant": tenant, "plan": "gold"})
        editor.admin(
            "/admin/v1/override/set",
            {"pattern": HOSTILE_PATTERN, "limits": ["per-minute=sliding:1/60s"]},
        )
        page.go("#/plans")
        shown = poll("the hostile tenants listed", lambda: page.find("#tenants-table").text)
        for tenant in HOSTILE_TENANTS:
            assert tenant in shown, f"{tenant!r} not shown as text"
        assert HOSTILE_PATTERN.split(" ")[0] in page.find("#overrides-table").text
        page.no_script_ran()
        for tenant in HOSTILE_TENANTS:
            page.go("#/tenant/" + urllib.request.quote(tenant, safe=""))
            poll("the hostile tenant's page", lambda t=tenant: page.find("#tenant-name").text == t)
            page.no_script_ran()
        page.go("#/throttled")
        poll("the hostile key", lambda: HOSTILE_TENANTS[1] in page.find("#throttled").text)
        page.no_script_ran()
        results["hostile_inputs"] = HOSTILE_TENANTS + [HOSTILE_PATTERN]

        # A page of another origin forging writes with the editor's cookie.
        forged_posts_change_nothing(page, editor, site, "editor")

        # The viewer: no edit control, its forged and its own writes refused.
        page.sign_in(args.viewer_token)
        page.go("#/tenant/acme")
        page.visible("#tenant-detail")
        page.go("#/plans")
        poll("the plans as the viewer sees them", lambda: page.find("#plans-table").text)
        controls = page.all(".editor-only") + page.all("button.plan-delete") + page.all("button.override-delete")
        assert not controls, f"the viewer sees {len(controls)} edit controls"
        page.shot("console-viewer")
        forged_posts_change_nothing(page, editor, site, "viewer")
        page.go("#/plans")
        page.visible("#plans-table")
        before = editor.version()
        status = page.browser.execute_async_script(
            """const done = arguments[arguments.length - 1];
            fetch('/admin/v1/session').then(r => r.json()).then(session =>
              fetch('/admin/v1/tenant/delete', {method: 'POST', headers: {
                'Content-Type': 'application/json', 'X-CSRF-Token': session.csrf},
                body: JSON.stringify({tenant: 'acme'})}))
              .then(r => done(r.status), e => done(String(e)));"""
        )
        assert status == 403, f"the viewer's own write answered {status}"
        assert editor.version() == before, "the viewer's write changed the store"
        results["screenshots"] = sorted(p.name for p in shots.glob("console-*.png"))
        return results
    except Exception:
        # What the page showed when it failed, for the test's output.
        try:
            print("PAGE URL: " + browser.current_url, file=sys.stderr)
            print("PAGE TEXT:\n" + browser.find_element(By.TAG_NAME, "body").text[:4000], file=sys.stderr)
            for entry in browser.get_log("browser"):
                print("BROWSER LOG: " + str(entry), file=sys.stderr)
        except Exception as error:
            print(f"(the page could not be read: {error!r})", file=sys.stderr)
        raise
    finally:
        site_server.shutdown()
        browser.quit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--admin", required=True)
    parser.add_argument("--http", required=True)
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--editor-token", required=True)
    parser.add_argument("--viewer-token", required=True)
    parser.add_argument("--screenshots", required=True)
    results = run(parser.parse_args())
    print("RESULT " + json.dumps(results))
    print("console browser test passed")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
