"""Headless Chromium driven through Selenium, as the browser tests use it: Debian's chromium and
chromium-driver (make deps installs them), never a downloaded driver."""
import os
import shutil

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


class BrowserUnavailable(Exception):
    pass


def chromium(*extra):
    """A new headless Chromium; `extra` are more command-line arguments."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        raise BrowserUnavailable("chromium and chromium-driver are missing: run make deps (Debian packages chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
                     "--force-prefers-reduced-motion", "--lang=en-US", *extra]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(20)
    return driver
