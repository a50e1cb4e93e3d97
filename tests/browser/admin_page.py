#!/usr/bin/env python3
"""The admin page in a real browser (Debian's Chromium, driven by Playwright).

    admin_page.py URL --expect-server NAME --add-command PATH
                  [--token TOKEN] [--screenshots DIR] [--search WORDS]

Checks, against a running daemon at URL that already has the server NAME
registered and connected:
- the page loads with no console error, no uncaught exception and no failed
  request (the few HTTP errors a step provokes on purpose are allowed in
  that step only);
- with --token: `/` is first the sign-in form (401); a wrong token is
  refused with the daemon's message; the right one, typed and submitted
  from the keyboard, opens the page; "Sign out" brings the form back;
- the servers table lists NAME, and the live figures fill in;
- a server added through the form with the keyboard only (focus, Tab, type,
  Enter) is registered (checked through the API), connects, can be
  disconnected and connected again, and a second registration of the same
  name shows the daemon's error in the live region;
- the tools of NAME are listed and the server filter works;
- a search (POST /api/v1/search) lists results with a score and server;
- removing the added server asks for confirmation, then removes it;
- the audit log shows the registration, and its filters work.

Screenshots (full page, 1280x800 viewport) go to DIR when given.
Exits 1 with the reason on the first failure.

The browser is never downloaded: /usr/bin/chromium is launched directly.
"""

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


class Watch:
    """Collects console errors, uncaught exceptions and failed requests.

    `allowing(...)` lets a step provoke specific errors on purpose (a wrong
    token, a duplicate registration): only console errors about those
    paths, or aborted requests while the page navigates away, are then let
    through.
    """

    def __init__(self):
        self.problems = []
        self.allowed_paths = ()
        self.allow_aborts = False

    def attach(self, page):
        page.on("console", self.on_console)
        page.on("pageerror", lambda err: self.problems.append(f"uncaught exception: {err}"))
        page.on("requestfailed", self.on_request_failed)

    def on_console(self, message):
        if message.type != "error":
            return
        url = (message.location or {}).get("url", "")
        where = url.split("#")[0].split("?")[0]
        if any(where.endswith(path) for path in self.allowed_paths):
            return
        self.problems.append(f"console error: {message.text} (at {url or 'unknown'})")

    def on_request_failed(self, request):
        failure = request.failure or "unknown"
        if self.allow_aborts and "ERR_ABORTED" in failure:
            return
        self.problems.append(f"request failed: {request.method} {request.url}: {failure}")

    @contextlib.contextmanager
    def allowing(self, *paths, aborts=False):
        self.allowed_paths, self.allow_aborts = paths, aborts
        try:
            yield
        finally:
            self.allowed_paths, self.allow_aborts = (), False

    def assert_clean(self, step):
        if self.problems:
            raise Failed(f"{step}: " + "; ".join(self.problems))


class Api:
    """The admin API from Python, to confirm what the page did."""

    def __init__(self, base, token):
        self.base = base.rstrip("/")
        self.token = token

    def get(self, path):
        request = urllib.request.Request(self.base + path, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def servers(self):
        return {s["name"]: s for s in self.get("/api/v1/aggregator/servers")}

    def wait_indexed(self, deadline_s=60):
        """Polls until every tool in the catalog is in the search index."""
        end = time.monotonic() + deadline_s
        while True:
            status = self.get("/api/v1/search/status")
            if not status["syncing"] and status["indexed_tools"] == status["total_tools"] > 0:
                return
            check(time.monotonic() < end, f"the search index did not settle within {deadline_s} s: {status}")
            time.sleep(0.05)


class Shots:
    def __init__(self, directory):
        self.directory = Path(directory) if directory else None
        if self.directory:
            self.directory.mkdir(parents=True, exist_ok=True)

    def take(self, page, name):
        if self.directory:
            page.screenshot(path=str(self.directory / f"{name}.png"), full_page=True)


def dismiss_messages(page):
    """Closes the messages in the live region (so screenshots show the page)."""
    for button in page.get_by_role("button", name="Dismiss message", exact=True).all():
        with contextlib.suppress(PlaywrightError):
            button.click(timeout=2_000)
    expect(page.locator("#alerts .message")).to_have_count(0)


UNLABELLED = """() => [...document.querySelectorAll('button, input, select, textarea, a[href]')]
  .filter((el) => el.type !== 'hidden')
  .filter((el) => !((el.labels && el.labels.length) || el.getAttribute('aria-label')
    || el.getAttribute('aria-labelledby') || (el.textContent || '').trim()))
  .map((el) => el.outerHTML.slice(0, 120))"""

INLINE = """() => [...document.querySelectorAll('*')]
  .filter((el) => (el.getAttribute('style') || '').trim() !== ''
    || [...el.attributes].some((a) => a.name.startsWith('on')))
  .map((el) => el.outerHTML.slice(0, 120))"""


def assert_accessible(page, step):
    """Every control has a name (label, aria-label or text); no inline style or handler.

    (Chromium itself leaves empty `style=""` attributes on inputs it has
    looked at for autofill: only non-empty ones count.)
    """
    unlabelled = page.evaluate(UNLABELLED)
    check(not unlabelled, f"{step}: controls without a label: {unlabelled}")
    inline = page.evaluate(INLINE)
    check(not inline, f"{step}: inline style or event handler attributes: {inline}")


def is_call(method, path):
    return lambda r: r.request.method == method and r.url.split("?")[0].endswith(path)


def sign_in(page, watch, shots, url, token):
    with watch.allowing("/"):
        response = page.goto(url)
    check(response is not None and response.status == 401,
          f"GET / without a session should answer the sign-in form with 401, got {response and response.status}")
    field = page.get_by_label("Admin token")
    expect(field).to_be_visible()
    expect(field).to_be_focused()
    expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    shots.take(page, "signin")

    # A wrong token: the daemon's reason is shown, in an alert.
    with watch.allowing("/admin/session"):
        page.keyboard.type("not-the-token")
        with page.expect_response(is_call("POST", "/admin/session")) as info:
            page.keyboard.press("Enter")
        check(info.value.status == 401, f"a wrong token should be refused with 401, got {info.value.status}")
        expect(page.get_by_role("alert")).to_have_text(re.compile(r"\S"))
    expect(field).to_be_focused()
    watch.assert_clean("sign-in with a wrong token")

    # The right token, from the keyboard.
    page.keyboard.press("Control+A")
    page.keyboard.type(token)
    with page.expect_response(is_call("POST", "/admin/session")) as info:
        page.keyboard.press("Enter")
    check(info.value.status == 204, f"the right token should give 204, got {info.value.status}")
    expect(page.get_by_role("heading", name="Servers", level=2, exact=True)).to_be_visible()
    watch.assert_clean("sign-in")


def tab_to(page, label):
    page.keyboard.press("Tab")
    expect(page.get_by_label(label, exact=True)).to_be_focused()


def fill_add_form(page, name, command, args, description):
    """Fills the add-server form with the keyboard only and submits it with Enter."""
    page.get_by_label("Name", exact=True).focus()
    page.keyboard.type(name)
    tab_to(page, "Transport")  # left at stdio
    tab_to(page, "Command")
    page.keyboard.type(command)
    tab_to(page, "Arguments")
    page.keyboard.type(args)
    tab_to(page, "Description")  # the hidden URL field is skipped
    page.keyboard.type(description)
    with page.expect_response(is_call("POST", "/api/v1/aggregator/servers")) as info:
        page.keyboard.press("Enter")
    return info.value


def servers_view(page, watch, shots, api, args):
    page.get_by_role("link", name=re.compile(r"^Servers")).click()
    expect(page.get_by_role("heading", name="Servers", level=2, exact=True)).to_be_visible()
    row = page.locator(f'#servers-body tr[data-server="{args.expect_server}"]')
    expect(row).to_be_visible()
    expect(row.get_by_role("rowheader")).to_contain_text(args.expect_server)
    expect(row).to_contain_text("Connected")

    # Live figures from /metrics and /healthz.
    expect(page.locator("#fig-connected")).to_have_text(re.compile(r"^\d+ / \d+"))
    expect(page.locator("#fig-tools")).to_have_text(re.compile(r"^\d"))
    expect(page.locator("#fig-calls")).to_have_text(re.compile(r"^\d"))
    expect(page.locator("#fig-uptime")).to_have_text(re.compile(r"^\d+ "))
    expect(page.locator("#healthz")).to_have_text("healthy")
    watch.assert_clean("page load")

    # The transport picks which fields the form asks for.
    transport = page.get_by_label("Transport", exact=True)
    transport.select_option("HTTP")
    expect(page.get_by_label("URL", exact=True)).to_be_visible()
    expect(page.get_by_label("Command", exact=True)).to_be_hidden()
    transport.select_option("STDIO")
    expect(page.get_by_label("Command", exact=True)).to_be_visible()
    expect(page.get_by_label("URL", exact=True)).to_be_hidden()

    # Add a server with the keyboard only.
    new = args.new_server
    description = "Added from the browser test"
    response = fill_add_form(page, new, args.add_command, "--tools 2 --prefix 'browser_'", description)
    check(response.status == 201, f"registering {new} through the form answered {response.status}: {response.text()}")
    registered = api.servers().get(new)
    check(registered is not None, f"{new} is not in GET /api/v1/aggregator/servers after the form was submitted")
    check(registered["transport_type"] == "STDIO", f"{new} was registered as {registered['transport_type']}")
    check(registered["description"] == description, f"{new} has description {registered['description']!r}")
    config = registered["connection_config"]
    check(config.get("command") == args.add_command and config.get("args") == ["--tools", "2", "--prefix", "browser_"],
          f"{new} was registered with {config}")
    added = page.locator(f'#servers-body tr[data-server="{new}"]')
    expect(added).to_contain_text("Connected")
    expect(page.get_by_label("Name", exact=True)).to_have_value("")

    # The same name again: the daemon's 409 shows in the live region.
    with watch.allowing("/api/v1/aggregator/servers"):
        response = fill_add_form(page, new, args.add_command, "", "")
        check(response.status == 409, f"a duplicate registration answered {response.status}")
        alert = page.locator("#alerts .message.error")
        expect(alert).to_contain_text(new)
    watch.assert_clean("duplicate registration")
    alert.get_by_role("button", name="Dismiss message", exact=True).focus()
    page.keyboard.press("Enter")
    expect(page.locator("#alerts .message.error")).to_have_count(0)
    page.locator("#add-form").get_by_role("button", name="Clear", exact=True).click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("")

    # Disconnect and connect it again.
    with page.expect_response(is_call("POST", f"/servers/{new}/disconnect")) as info:
        page.get_by_role("button", name=f"Disconnect {new}", exact=True).click()
    check(info.value.status == 200, f"disconnect answered {info.value.status}")
    expect(added).to_contain_text("Disconnected")
    with page.expect_response(is_call("POST", f"/servers/{new}/connect")) as info:
        page.get_by_role("button", name=f"Connect {new}", exact=True).click()
    check(info.value.status == 200, f"connect answered {info.value.status}")
    expect(added).to_contain_text("Connected")
    expect(added.locator("td.num")).to_have_text(re.compile(r"^[1-9]"))

    dismiss_messages(page)
    page.mouse.move(0, 0)
    shots.take(page, "servers")
    watch.assert_clean("servers")


def tools_view(page, watch, shots, args):
    page.get_by_role("link", name=re.compile(r"^Tools")).click()
    expect(page.get_by_role("heading", name="Tools", level=2, exact=True)).to_be_focused()
    rows = page.locator("#tools-body tr[data-tool]")
    expect(rows.filter(has_text=args.new_server).first).to_be_visible()
    expect(rows.filter(has_text=args.expect_server).first).to_be_visible()
    server = page.locator("#view-tools").get_by_label("Server", exact=True)
    server.select_option(args.expect_server)
    expect(rows.filter(has_text=args.new_server)).to_have_count(0)
    count = rows.count()
    check(count > 0, f"no tools of {args.expect_server} are listed")
    for i in range(count):
        expect(rows.nth(i).locator("td").first).to_have_text(args.expect_server)
    expect(page.locator("#tools-summary")).to_contain_text(f"{count} of ")
    server.select_option("")
    shots.take(page, "tools")
    marks_and_markup(page, args)
    watch.assert_clean("tools")


HOSTILE = '<img src=x id=injected><b>bold</b> & "quotes"'
WITH_TOOLS = re.compile(r"/api/v1/aggregator/servers\?include_tools=true$")


def marks_and_markup(page, args):
    """Flags the API may add to a tool later (`quarantined`, `changed`) show
    as marks, and a description is text, never markup: both through a
    rewritten answer."""
    rows = page.locator("#tools-body tr[data-tool]")
    target = rows.filter(has_text=args.expect_server).first.get_attribute("data-tool")

    def rewrite(route):
        response = route.fetch()
        servers = response.json()
        for server in servers:
            for tool in server.get("tools") or []:
                if tool["id"] == target:
                    tool.update(quarantined=True, changed=True, description=HOSTILE)
        route.fulfill(response=response, json=servers)

    page.route(WITH_TOOLS, rewrite)
    refresh = page.locator("#view-tools").get_by_role("button", name="Refresh", exact=True)
    refresh.click()
    row = page.locator(f'#tools-body tr[data-tool="{target}"]')
    expect(row.locator(".badge", has_text="quarantined")).to_be_visible()
    expect(row.locator(".badge", has_text="changed")).to_be_visible()
    expect(row).to_contain_text(HOSTILE)
    check(page.locator("#injected").count() == 0 and row.locator("b").count() == 0,
          "a tool description was put in the page as markup")
    page.unroute(WITH_TOOLS)
    refresh.click()
    expect(row.locator(".badge", has_text="quarantined")).to_have_count(0)


def search_view(page, watch, shots, api, args):
    api.wait_indexed()  # the added server's tools too
    page.get_by_role("link", name="Search", exact=True).click()
    query = page.get_by_label("What should the tool do?")
    expect(query).to_be_focused()
    page.keyboard.type(args.search)
    with page.expect_response(is_call("POST", "/api/v1/search")) as info:
        page.keyboard.press("Enter")
    check(info.value.status == 200, f"search answered {info.value.status}: {info.value.text()}")
    rows = page.locator("#search-body tr")
    expect(rows.first).to_be_visible()
    expect(rows.first.locator("td").nth(2)).to_have_text(re.compile(r"\d\.\d{3}"))
    expect(page.locator("#search-summary")).to_contain_text(f"for “{args.search}”")
    expect(rows.filter(has_text=args.expect_server).first).to_be_visible()
    expect(rows.filter(has_text=args.new_server).first).to_be_visible()
    shots.take(page, "search")

    # Only one server's tools.
    page.locator("#view-search").get_by_label("Server", exact=True).select_option(args.expect_server)
    with page.expect_response(is_call("POST", "/api/v1/search")) as info:
        page.get_by_role("button", name="Search", exact=True).click()
    check(info.value.status == 200, f"search answered {info.value.status}: {info.value.text()}")
    check(info.value.request.post_data_json.get("server_filter") == [args.expect_server],
          f"the search did not send the server filter: {info.value.request.post_data}")
    expect(rows.filter(has_text=args.new_server)).to_have_count(0)
    count = rows.count()
    check(count > 0, f"a search of {args.expect_server}'s tools found nothing")
    for i in range(count):
        expect(rows.nth(i).locator("td").nth(1)).to_have_text(args.expect_server)
    watch.assert_clean("search")


def remove_added(page, watch, api, args):
    new = args.new_server
    page.get_by_role("link", name=re.compile(r"^Servers")).click()
    page.get_by_role("button", name=f"Remove {new}", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(new)
    # Cancel first (Escape): nothing happens.
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    check(new in api.servers(), f"{new} was removed although the removal was cancelled")
    page.get_by_role("button", name=f"Remove {new}", exact=True).click()
    with page.expect_response(is_call("DELETE", f"/servers/{new}")) as info:
        dialog.get_by_role("button", name=f"Remove {new}", exact=True).click()
    check(info.value.status == 204, f"removal answered {info.value.status}")
    expect(page.locator(f'#servers-body tr[data-server="{new}"]')).to_have_count(0)
    servers = api.servers()
    check(new not in servers, f"{new} is still registered after its removal")
    # The live figures follow (from /metrics).
    connected = sum(1 for s in servers.values() if s["status"] == "CONNECTED")
    expect(page.locator("#fig-connected")).to_have_text(re.compile(rf"^{connected} / {len(servers)}"))
    watch.assert_clean("remove")


def audit_view(page, watch, shots, args):
    new = args.new_server
    page.get_by_role("link", name="Audit log", exact=True).click()
    expect(page.get_by_role("heading", name="Audit log", level=2, exact=True)).to_be_focused()
    rows = page.locator("#audit-body tr[data-seq]")
    expect(rows.filter(has_text=new).filter(has_text="register").first).to_be_visible()
    expect(rows.filter(has_text=new).filter(has_text="remove").first).to_be_visible()
    dismiss_messages(page)
    shots.take(page, "audit")

    view = page.locator("#view-audit")
    view.get_by_label("Server", exact=True).focus()
    page.keyboard.type(new)
    view.get_by_label("Action", exact=True).focus()
    page.keyboard.type("register")
    with page.expect_response(lambda r: "/api/v1/aggregator/audit" in r.url and "action=register" in r.url) as info:
        page.keyboard.press("Enter")
    check(info.value.status == 200, f"the audit filter answered {info.value.status}")
    # Only registrations of that server are left (wait for the other rows to go).
    expect(rows.filter(has_text="remove")).to_have_count(0)
    count = rows.count()
    check(count >= 1, "the audit filter left no entry")
    for i in range(count):
        expect(rows.nth(i).locator("td").nth(2)).to_have_text("register")
        expect(rows.nth(i).locator("td").nth(3)).to_have_text(new)
    watch.assert_clean("audit")


def sign_out(page, watch):
    # The page reloads: `/` is the sign-in form again (a 401 document).
    with watch.allowing("/"):
        with page.expect_response(is_call("DELETE", "/admin/session")) as info:
            page.get_by_role("button", name="Sign out", exact=True).click()
        check(info.value.status == 204, f"DELETE /admin/session answered {info.value.status}")
        expect(page.get_by_label("Admin token")).to_be_visible()
    watch.assert_clean("sign-out")


def run(args):
    watch = Watch()
    shots = Shots(args.screenshots)
    api = Api(args.url, args.token)
    check(args.expect_server in api.servers(), f"{args.expect_server} is not registered on {args.url}")
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright, tempfile.TemporaryDirectory(prefix="admin-page-") as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 800},
            color_scheme="light",
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            watch.attach(page)
            try:
                if args.token:
                    sign_in(page, watch, shots, args.url, args.token)
                else:
                    response = page.goto(args.url)
                    check(response is not None and response.status == 200,
                          f"GET / answered {response and response.status}")
                    # No token asked for: nothing to sign out of.
                    expect(page.get_by_role("button", name="Sign out", exact=True)).to_be_hidden()
                servers_view(page, watch, shots, api, args)
                tools_view(page, watch, shots, args)
                search_view(page, watch, shots, api, args)
                remove_added(page, watch, api, args)
                audit_view(page, watch, shots, args)
                assert_accessible(page, "the admin page")
                if args.token:
                    sign_out(page, watch)
                    assert_accessible(page, "the sign-in page")
                watch.assert_clean("end")
            except Exception:
                if shots.directory:
                    with contextlib.suppress(Exception):
                        page.screenshot(path=str(shots.directory / "failure.png"), full_page=True)
                raise
        finally:
            context.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="the daemon's listener, e.g. http://127.0.0.1:8765")
    parser.add_argument("--token", help="the admin token (the daemon runs with --require-token)")
    parser.add_argument("--screenshots", help="directory for the screenshots")
    parser.add_argument("--expect-server", required=True, help="a registered, connected server")
    parser.add_argument("--add-command", required=True, help="the command of the stdio server the form adds (the fixture server)")
    parser.add_argument("--new-server", default="browser-added", help="the name of the server the form adds")
    parser.add_argument("--search", default="echo", help="words the fixture's tools match")
    args = parser.parse_args()
    args.url = args.url.rstrip("/") + "/"
    try:
        run(args)
    except Failed as failure:
        print(f"admin page: FAILED: {failure}", file=sys.stderr)
        return 1
    except AssertionError as failure:
        print(f"admin page: FAILED: {failure}", file=sys.stderr)
        return 1
    except PlaywrightError as failure:
        print(f"admin page: FAILED (browser): {failure}", file=sys.stderr)
        return 1
    print("admin page: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
