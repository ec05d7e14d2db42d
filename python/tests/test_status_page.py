"""The status page in a real headless browser: Debian's chromium, driven by Playwright from
PyPI (no browser download), against a `dt-rdzv serve` started and stopped by the test.

A job of exactly three members trains; the page (opened with the token in its fragment) shows
them active; one is SIGKILLed: the page marks it missing with the cause of its loss among the
events; a replacement joins and the page shows the new round. A page with a wrong token is
refused and shows no job. Screenshots go to ``target/test-artifacts/``.

A job whose rank 3 stops calling while the others wait for it (members from the
``progress_members`` example, whose heartbeats carry summaries of their calls) is drawn as a
timeline: the chart's canvas is drawn, rank 3's line stands out in red, its legend row is marked
the culprit and the server's finding is shown in words above it. With
``DTCOMM_DOCS_SCREENSHOT=1`` the picture is also saved to ``docs/images/status-timeline.png``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import native_server as native_server_mod
from native_server import ROOT, Procs, procs  # noqa: F401 (fixture)
from browser import NEEDS_CHROMIUM, launch
from test_fast_failure import _start, _training

ARTIFACTS = ROOT / "target" / "test-artifacts"


@NEEDS_CHROMIUM
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
            browser = launch(pw)
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


def _example(name: str) -> str:
    """An example binary of dt-rdzv, beside the server binary (``cargo test`` builds them)."""
    path = Path(native_server_mod.dt_rdzv_bin()).parent / "examples" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: cargo build -p dt-rdzv --example {name}")
    return str(path)


# The culprit's colour on the page (status_page.html's CULPRIT), as the canvas holds it.
CULPRIT_RGB = (0xCF, 0x22, 0x2E)


@NEEDS_CHROMIUM
@pytest.mark.parametrize(("members", "stuck"), [(6, 3), (80, 70)], ids=["6-ranks", "80-ranks"])
def test_status_page_draws_a_hung_job_with_its_culprit_in_a_real_browser(
    procs: Procs, tmp_path: Path, members: int, stuck: int  # noqa: F811
) -> None:
    """6 ranks: a line each; 80 ranks (over the server's 64 lines): the min-max band, the
    median and the ranks furthest behind, the culprit among them."""
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = native_server_mod.start(tmp_path)
    assert server.http, "the server printed no HTTP address"
    job = "hung-job"
    big = members > 64
    try:
        # The ranks complete an all_reduce every 100 ms for 8 s; then rank `stuck` calls
        # nothing more and the others wait for it.
        procs.start("members", [_example("progress_members"), server.native, server.fingerprint,
                                server.token, job, str(members), str(stuck), "8", "300"],
                    env=dict(os.environ))
        procs.wait_for("every member has its rank", lambda: "ready" in procs.out("members"), 60)
        with sync_api.sync_playwright() as pw:
            browser = launch(pw)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.goto(f"http://{server.http}/#token={server.token}&job={job}")
                pic = page.locator(f'.timeline[data-job="{job}"]')
                # The finding in words, once the others have waited long enough.
                finding = pic.locator(".finding")
                sync_api.expect(finding.first).to_contain_text(f"for rank {stuck}", timeout=60_000)
                sync_api.expect(finding.first).to_contain_text("wait in all_reduce")
                sync_api.expect(pic).to_have_attribute("data-culprits", str(stuck))
                culprit_row = pic.locator(".u-legend .u-series.culprit")
                sync_api.expect(culprit_row).to_have_count(1, timeout=15_000)
                sync_api.expect(culprit_row).to_contain_text(f"rank {stuck}")
                rows = pic.locator(".u-legend .u-series").count()
                # Time, and a line per rank; or time, max, median, min and at most 8 laggards.
                assert (4 < rows <= 12) if big else rows == members + 1, rows
                # Let the flat stretch after the stall show, then read the canvas's pixels.
                page.wait_for_timeout(4_000)
                counts = page.evaluate(
                    """([sel, rgb]) => {
                        const c = document.querySelector(sel + " canvas");
                        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
                        let drawn = 0, culprit = 0;
                        for (let i = 0; i < d.length; i += 4) {
                            if (d[i + 3] > 0) drawn++;
                            if (d[i] === rgb[0] && d[i + 1] === rgb[1] && d[i + 2] === rgb[2]
                                && d[i + 3] === 255) culprit++;
                        }
                        return { drawn, culprit, width: c.width };
                    }""",
                    [f'.timeline[data-job="{job}"]', list(CULPRIT_RGB)])
                assert counts["drawn"] > 5_000, counts
                assert counts["culprit"] > 100, f"the culprit's line is not drawn in red: {counts}"
                note = pic.locator(".note").inner_text()
                expected = (f"median over {members} reporting ranks" if big
                            else f"{members} ranks, one line each")
                assert expected in note, note
                pic.screenshot(path=str(ARTIFACTS / f"status-timeline-{members}.png"))
                if os.environ.get("DTCOMM_DOCS_SCREENSHOT") == "1" and not big:
                    pic.screenshot(path=str(ROOT / "docs" / "images" / "status-timeline.png"))
                assert not errors, errors
            finally:
                browser.close()
    finally:
        procs.close()
        server.stop()
