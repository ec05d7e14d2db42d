"""The status page in a real headless browser: Debian's chromium, driven by Playwright from
PyPI (no browser download), against a `dt-rdzv serve` started and stopped by the test.

A job of exactly three members trains; the page (opened with the token in its fragment) shows
them active; one is SIGKILLed: the page marks it missing with the cause of its loss among the
events; a replacement joins and the page shows the new round. A page with a wrong token is
refused and shows no job. Screenshots go to ``target/test-artifacts/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import native_server as native_server_mod
from native_server import ROOT, Procs, procs  # noqa: F401 (fixture)
from test_fast_failure import _start, _training

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "target" / "test-artifacts"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/setup.sh installs it as root)")
def test_status_page_follows_a_job_through_a_loss_in_a_real_browser(
    procs: Procs, tmp_path: Path  # noqa: F811
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = native_server_mod.start(tmp_path, heartbeat_timeout="2s")
    assert server.http, "the server printed no HTTP address"
    url = f"http://{server.http}/"
    try:
        job = "status-page-job"
        names = _start(procs, tmp_path, server, 3, "3:3", steps=100_000, job=job)
        ranks = _training(procs, names, 3, 1)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page()
                # A wrong token: refused, nothing shown.
                page.goto(url + "#token=wrong")
                sync_api.expect(page.locator("#status")).to_contain_text("refused", timeout=15_000)
                assert page.locator("tr.member").count() == 0
                page.screenshot(path=str(ARTIFACTS / "status-page-refused.png"))

                page = browser.new_page()
                page.goto(url + "#token=" + server.token)
                active = page.locator('tr.member[data-state="active"]')
                sync_api.expect(active).to_have_count(3, timeout=15_000)
                sync_api.expect(page.locator("section.job h2")).to_contain_text("round 1")
                assert page.url == url, "the token is taken out of the address bar"
                page.screenshot(path=str(ARTIFACTS / "status-page-running.png"), full_page=True)

                victim = next(n for n in names if ranks[n] == 1)
                member = page.locator('tr.member[data-state="active"]').nth(1).get_attribute(
                    "data-member")
                assert member, "rank 1's row names its member"
                procs.kill_group(victim)
                missing = page.locator(f'tr.member[data-state="missing"][data-member="{member}"]')
                sync_api.expect(missing).to_have_count(1, timeout=15_000)
                sync_api.expect(missing.locator("td.why")).to_contain_text("lost:")
                lost = page.locator("#events tr.kind-lost")
                sync_api.expect(lost.first).to_contain_text(member, timeout=15_000)
                sync_api.expect(lost.first).to_contain_text("lost:")
                page.screenshot(path=str(ARTIFACTS / "status-page-missing.png"), full_page=True)

                # A replacement steps in: the next round forms and the page follows.
                _start(procs, tmp_path, server, 1, "3:3", steps=100_000, job=job, first=3)
                sync_api.expect(page.locator("section.job h2")).to_contain_text(
                    "round 2", timeout=60_000)
                sync_api.expect(active).to_have_count(3, timeout=15_000)
                sync_api.expect(missing).to_have_count(0)
                page.screenshot(path=str(ARTIFACTS / "status-page-new-round.png"), full_page=True)
            finally:
                browser.close()
    finally:
        procs.close()
        server.stop()
