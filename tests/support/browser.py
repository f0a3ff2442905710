"""Debian's chromium, headless, driven by Selenium through Debian's chromium-driver (no browser download), and the
web UI's pages as a user reaches them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
T = TypeVar("T")


def chromium(width: int = 1280, height: int = 800) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-sandbox: the tests run as root, where chromium's sandbox refuses to start
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                f"--window-size={width},{height}", "--disable-extensions",
                "--disable-background-networking"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for driver.get_log("browser")
    return webdriver.Chrome(options=options, service=Service(DRIVER))


def wait_for(what: Callable[[], T | None], timeout: float = 15, why: str = "") -> T:
    """`what()` once it answers something true (polled; a stale or missing element is 'not yet')."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = what()
            if found:
                return found
        except (NoSuchElementException, StaleElementReferenceException):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {why or what}")
        time.sleep(0.05)


def _choose(menu: Select, text: str) -> bool:
    """Choose the first option showing `text` (False while there is none: the list is still loading)."""
    for i, option in enumerate(menu.options):
        if text in option.text:
            menu.select_by_index(i)
            return True
    return False


class UiPage:
    """The UI in one browser: log in and out, go to a page, fill its forms (found by their title)."""

    def __init__(self, driver: webdriver.Chrome, url: str, screenshots: Path) -> None:
        self.driver, self.url, self.screenshots = driver, url, screenshots

    def css(self, selector: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def login(self, user: str = "", password: str = "", token: str = "", fresh: bool = True) -> None:
        """Log in from the form: of a fresh page with no session, else (`fresh` False) of the page as it is."""
        if fresh:  # (a reload keeps sessionStorage: cleared first)
            self.driver.get(self.url + "/ui/#/map")
            self.driver.execute_script("sessionStorage.clear()")
            self.driver.get("about:blank")
            self.driver.get(self.url + "/ui/#/map")
        wait_for(lambda: self.all("#login:not(.hidden)"), why="the login form")
        for field, value in (("user", user), ("password", password), ("token", token)):
            self.css(f"#{field}").clear()
            self.css(f"#{field}").send_keys(value)
        self.css("#password" if user else "#token").send_keys(Keys.ENTER)  # (the keyboard's way to submit)
        wait_for(lambda: self.css("#logout:not(.hidden)") and self.rendered() == "map", why="logged in, map drawn")

    def logout(self) -> None:
        self.css("#logout").click()
        wait_for(lambda: self.css("#login:not(.hidden)"), why="the login form")

    def rendered(self) -> str | None:
        return self.css("#page").get_attribute("data-rendered")

    def go(self, page: str) -> None:
        self.driver.execute_script("document.getElementById('page').dataset.rendered = ''")
        self.css(f'#nav a[data-page="{page}"]').click()
        wait_for(lambda: self.rendered() == page, why=f"page {page} drawn")

    def focus(self, selector: str) -> None:
        """Click into an element of the data (found afresh: a live redraw may replace it meanwhile)."""
        wait_for(lambda: self.css(selector).click() or True, why=f"focus on {selector}")

    def form(self, title: str) -> WebElement:
        return self.css(f'form[aria-label="{title}"]')

    def fill(self, title: str, **values: str | bool) -> None:
        """Fill the form's fields by name and submit it."""
        form = self.form(title)
        for name, value in values.items():
            control = form.find_element(By.NAME, name)
            if control.tag_name == "select":
                wait_for(lambda c=control, v=str(value): _choose(Select(c), v), why=f"option {value} chosen")
            elif isinstance(value, bool):
                if control.is_selected() != value:
                    control.click()
            else:
                control.clear()
                control.send_keys(value)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    def table_text(self) -> str:
        return self.css("#page .data").text

    def error(self) -> str:
        return self.css("#error").text

    def console_faults(self) -> list[str]:
        """What the console said since the last call of a policy refusal or an uncaught error (not every SEVERE
        entry: an API refusal the page expects, a 4xx, is logged at that level too)."""
        entries = self.driver.get_log("browser")
        faults = ("Content Security Policy", "Uncaught", "requires 'Trusted")  # (the last: a Trusted Types refusal)
        return [e["message"] for e in entries if any(f in e["message"] for f in faults)]

    def shoot(self, name: str) -> Path:
        path = self.screenshots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path
