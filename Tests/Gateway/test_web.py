"""The web console (/console) and the user inbox (/inbox) in headless Chromium, driven through
Selenium against the real services and a real agent: signing in, a send from the form reaching the
agent, bad input in the form, a dismiss on the agent showing on the page, a dismiss on the page
reaching the agent, and a page that resumes its stream after the gateway restarts. Each test saves
a screenshot in NH_SCREENSHOT_DIR (default .build/screenshots; `make screenshots` writes the
README's)."""
import json
import os
import subprocess
import time

import pytest
import requests

import agentprompt  # noqa: E402  (Tests/Support, on the path conftest sets)
import browser as browser_support  # noqa: E402
from conftest import BIN, ROOT, Hub, answers, json_lines, running_hub, sas_token, wait_until

selenium = pytest.importorskip("selenium", reason="selenium comes from PyPI; make deps installs it")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException  # noqa: E402

SCREENSHOTS = os.environ.get("NH_SCREENSHOT_DIR", os.path.join(ROOT, ".build", "screenshots"))
API = "api-version=2015-01"


def chromium(*extra):
    try:
        return browser_support.chromium(*extra)
    except browser_support.BrowserUnavailable as error:
        pytest.fail(str(error))


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def remote_browser():
    """A browser that reaches the gateway as hub.test, as from another machine over plain HTTP: not
    a secure context, so WebCrypto is not there."""
    driver = chromium("--host-resolver-rules=MAP hub.test 127.0.0.1")
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def web_hub():
    """A hub of its own, since these tests restart the gateway."""
    yield from running_hub(prefix="nh-web-")


def nhctl(hub, *arguments):
    return subprocess.run([os.path.join(BIN, "nhctl"), *arguments], env=hub.env, capture_output=True, text=True, timeout=30)


def credential(hub, user):
    result = nhctl(hub, "user", "credential", user)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def agent(web_hub):
    """A Linux agent subscribed to World and signed in as user erin."""
    hub = web_hub
    output = os.path.join(hub.data, "web-agent.jsonl")
    env = {"NH_AGENT_HOME": os.path.join(hub.data, "web-agent"), "NH_AGENT_INSTALLATION_ID": "web-device",
           "NH_AGENT_USER_CREDENTIAL": credential(hub, "erin")}
    subprocess.run([os.path.join(BIN, "nh-agent"), "subscribe", "World"], env={**hub.env, **env}, check=True, capture_output=True)
    hub.start("web-agent", "nh-agent", env=env, stdout=open(output, "ab"))
    assert wait_until(lambda: 'nh_agents{service="nh-dispatch"} 1' in requests.get(f"{hub.base}/metrics").text)
    return {"output": output, "env": {**hub.env, **env}}


def connection_string(hub, name="DefaultFullSharedAccessSignature", key=None):
    return f"Endpoint=sb://127.0.0.1:{hub.http_port}/;SharedAccessKeyName={name};SharedAccessKey={key or hub.keys()[name]}"


def until(condition, timeout=20.0):
    """wait_until for conditions that read the page: the pages redraw their lists as data comes
    in, so an element read a moment ago may be gone; that counts as not yet."""
    def attempt():
        try:
            return condition()
        except (StaleElementReferenceException, NoSuchElementException, AttributeError):
            return False
    return wait_until(attempt, timeout=timeout)


def click(find):
    """Clicks what `find` returns, finding it again if the page redrew it meanwhile."""
    assert until(lambda: find().click() is None, timeout=10)


def text(driver, element_id):
    return driver.find_element(By.ID, element_id).text


def visible(driver, element_id):
    return driver.find_element(By.ID, element_id).is_displayed()


def screenshot(driver, name, full_page=False):
    """The page from its top; with full_page, the window is made as tall as the page first."""
    os.makedirs(SCREENSHOTS, exist_ok=True)
    driver.execute_script("window.scrollTo(0, 0)")
    size = driver.get_window_size()
    if full_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], height + 140)
    driver.save_screenshot(os.path.join(SCREENSHOTS, name))
    driver.set_window_size(size["width"], size["height"])


def type_into(driver, element_id, value):
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def post_user_notification(hub, user, app_id, title, body):
    r = requests.post(f"{hub.base}/hub/users/{user}/notifications?{API}", headers={"Authorization": hub.token()},
                      data=json.dumps({"appNotificationId": app_id, "visual": {"title": title, "body": body}}))
    assert r.status_code == 201, r.text
    return r.json()["notification"]["id"]


def test_console_signs_in_checks_input_and_sends_to_a_real_agent(web_hub, agent, browser):
    hub, driver = web_hub, browser
    driver.get(f"{hub.base}/console")
    assert driver.title.startswith("Notification hub console")

    # A wrong key is refused by the gateway, and the page says so.
    type_into(driver, "connection", connection_string(hub, key="d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXkgd3Jvbmc="))
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: visible(driver, "signin-error") and "401" in text(driver, "signin-error"), timeout=10)
    assert not visible(driver, "app")
    type_into(driver, "connection", "not a connection string")
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: "SharedAccessKeyName" in text(driver, "signin-error"), timeout=10)

    # Baidu credentials set over REST before signing in: the page lists the service, never the secret.
    r = requests.put(f"{hub.base}/hub/pns/baidu", headers={"Authorization": hub.token()},
                     json={"apiKey": "console-api-key", "secretKey": "console-secret-key"})
    assert r.status_code == 200, r.text
    type_into(driver, "connection", connection_string(hub))
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: visible(driver, "app"), timeout=10)
    def push_services():
        return {row.get_attribute("data-service"): row.text for row in driver.find_elements(By.CSS_SELECTOR, "#push-services tr")}
    assert until(lambda: "baidu" in push_services(), timeout=10), push_services()
    assert "apiKey console-api-key" in push_services()["baidu"] and "set over REST" in push_services()["baidu"]
    assert "console-secret-key" not in driver.page_source and not visible(driver, "push-none")
    assert requests.delete(f"{hub.base}/hub/pns/baidu", headers={"Authorization": hub.token()}).status_code == 200

    # Health: every service up, with its uptime.
    def services():
        return {row.get_attribute("data-service"): row.text for row in driver.find_elements(By.CSS_SELECTOR, "#health tr")}
    assert until(lambda: len(services()) == 5 and all(" up " in f" {v} " for v in services().values()), timeout=15), services()
    assert text(driver, "health-status") == "ok"

    # A broken expression: the server's message and a caret under its position, and a send refused.
    type_into(driver, "send-tags", "World && (Sports")
    assert until(lambda: "invalid_expression" in text(driver, "tags-check"), timeout=10)
    assert "never closed" in text(driver, "tags-check")
    assert visible(driver, "tags-caret") and text(driver, "tags-caret").splitlines()[-1] == " " * 9 + "^"
    driver.find_element(By.ID, "send-button").click()
    assert until(lambda: visible(driver, "send-error") and "400 invalid_expression" in text(driver, "send-error"), timeout=10)

    # The form's default properties fill the agents' default template: the notification shown has
    # a title and a message.
    type_into(driver, "send-tags", "World")
    assert until(lambda: "tags: World" in text(driver, "tags-check"), timeout=10)
    driver.find_element(By.ID, "send-button").click()
    assert until(lambda: any(l.get("payload") == {"title": "Hello", "message": "Hello from the console"}
                             for l in json_lines(agent["output"])), timeout=15), json_lines(agent["output"])[-3:]

    # An empty property name is refused in the page before anything is sent.
    type_into(driver, "send-properties", "=nameless")
    driver.find_element(By.ID, "send-button").click()
    assert until(lambda: "needs name=value" in text(driver, "send-error"), timeout=10)

    # A send from the form reaches the agent, and the outcome moves on to Completed.
    type_into(driver, "send-properties", "messageParam=From the console")
    driver.find_element(By.ID, "send-button").click()
    assert until(lambda: any(l.get("payload") == {"messageParam": "From the console"}
                                  or "From the console" in json.dumps(l.get("payload", {})) for l in json_lines(agent["output"])), timeout=15)
    assert until(lambda: text(driver, "outcome-state") == "Completed"
                      and "acknowledged 1" in text(driver, "outcome-counts"), timeout=15), text(driver, "outcome-counts")
    notification = text(driver, "outcome-id")
    assert until(lambda: driver.find_elements(By.CSS_SELECTOR, f'#messages tr[data-notification="{notification}"]'), timeout=10)
    assert until(lambda: all(part in driver.find_element(By.CSS_SELECTOR, f'#messages tr[data-notification="{notification}"]').text
                             for part in ["tags World", "Completed", "1 / 1 / 1"]), timeout=10)
    # The whole id, on one line; the state once, with the way it came only when there was more than it.
    cell = driver.find_element(By.CSS_SELECTOR, f'#messages tr[data-notification="{notification}"] td.id')
    assert cell.text == notification and cell.value_of_css_property("white-space") == "nowrap"
    path = text(driver, "outcome-path")
    assert path == "" or (" → " in path and path.endswith("Completed")), path

    # Installations by tag, then one opened.
    type_into(driver, "search", "World")
    driver.find_element(By.ID, "search-button").click()
    assert until(lambda: driver.find_elements(By.CSS_SELECTOR, '#installations tr[data-installation="web-device"]'), timeout=10)
    click(lambda: driver.find_element(By.CSS_SELECTOR, '#installations tr[data-installation="web-device"]'))
    assert until(lambda: visible(driver, "installation-detail") and '"installationId" : "web-device"' in text(driver, "installation-detail")
                      or '"installationId": "web-device"' in text(driver, "installation-detail"), timeout=10)
    # The template body is read whole: the JSON wraps inside the box instead of running past it.
    detail = driver.find_element(By.ID, "installation-detail")
    assert detail.value_of_css_property("white-space") == "pre-wrap"
    assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", detail)
    type_into(driver, "search", "NoSuchTag")
    driver.find_element(By.ID, "search-button").click()
    assert until(lambda: "no installation has that tag or id" in text(driver, "installations"), timeout=10)

    # The charts: one agent connected, and the deliveries counted.
    assert until(lambda: text(driver, "now-agents") == "1", timeout=15)
    type_into(driver, "search", "World")
    driver.find_element(By.ID, "search-button").click()
    assert until(lambda: driver.find_elements(By.CSS_SELECTOR, '#installations tr[data-installation="web-device"]'), timeout=10)
    screenshot(driver, "console.png", full_page=True)


def agent_user_events(agent, notification):
    return [l for l in json_lines(agent["output"]) if l.get("id") == notification and "notification" in l]


def item(driver, notification):
    found = driver.find_elements(By.CSS_SELECTOR, f'#list li[data-id="{notification}"]')
    return found[0] if found else None


def test_inbox_syncs_live_with_the_agent_and_resumes(web_hub, agent, browser):
    hub, driver = web_hub, browser
    first = post_user_notification(hub, "erin", "order-1", "Order shipped", "Your order is on its way")
    second = post_user_notification(hub, "erin", "order-2", "Payment received", "Thank you")
    assert until(lambda: agent_user_events(agent, first) and agent_user_events(agent, second), timeout=15)

    driver.get(f"{hub.base}/inbox")
    type_into(driver, "credential", "nhu1.forged.token")
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: visible(driver, "signin-error") and "401" in text(driver, "signin-error"), timeout=10)

    type_into(driver, "credential", credential(hub, "erin"))
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: item(driver, first) is not None and item(driver, second) is not None, timeout=10)
    assert text(driver, "who") == "signed in as erin"
    assert text(driver, "unread") == "2"
    assert until(lambda: text(driver, "live") == "live", timeout=10)

    # Dismissed on the agent: the page greys it out.
    result = subprocess.run([os.path.join(BIN, "nh-agent"), "dismiss", first], env=agent["env"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert until(lambda: item(driver, first).get_attribute("data-action") == "dismissed", timeout=5)
    assert text(driver, "unread") == "1"
    # The count and the dots agree: the dismissed one is still unread but has no dot; the other has one.
    def dot(notification):
        title = item(driver, notification).find_element(By.CSS_SELECTOR, ".title")
        return driver.execute_script("return window.getComputedStyle(arguments[0], '::before').content", title)
    assert item(driver, first).get_attribute("data-read") == "unread"
    assert dot(first) in ("none", "normal", "")
    assert "●" in dot(second)

    # Dismissed on the page: the agent has it.
    click(lambda: item(driver, second).find_element(By.CSS_SELECTOR, "button.dismiss"))
    assert until(lambda: any(l["notification"].get("userActionState") == "dismissed" for l in agent_user_events(agent, second)), timeout=10)
    assert until(lambda: item(driver, second).get_attribute("data-action") == "dismissed", timeout=5)

    # A new notification arrives live.
    third = post_user_notification(hub, "erin", "order-3", "Delivered", "Left at the front door")
    assert until(lambda: item(driver, third) is not None and item(driver, third).get_attribute("data-read") == "unread", timeout=10)

    # The gateway restarts; what changed meanwhile reaches the page when its stream comes back.
    assert hub.stop("nh-gateway") == 0
    assert until(lambda: text(driver, "live") != "live", timeout=10)
    fourth = subprocess.run([os.path.join(BIN, "nhctl"), "user", "post", "erin", "--json", "--title", "While away", "--body", "Sent during the restart",
                             "--app-id", "order-4"], env=hub.env, capture_output=True, text=True, timeout=30)
    assert fourth.returncode == 0, fourth.stderr + fourth.stdout
    fourth_id = json.loads(fourth.stdout)["id"]
    subprocess.run([os.path.join(BIN, "nh-agent"), "read", third], env=agent["env"], check=True, capture_output=True, timeout=30)
    hub.start("nh-gateway")
    assert until(lambda: answers(hub), timeout=20)
    assert until(lambda: item(driver, fourth_id) is not None, timeout=20)
    assert until(lambda: item(driver, third).get_attribute("data-read") == "read", timeout=10)
    assert until(lambda: text(driver, "live") == "live", timeout=10)

    # Mark all as read, seen by the agent too; delete one.
    driver.find_element(By.ID, "mark-all").click()
    assert until(lambda: text(driver, "unread") == "0", timeout=10)
    assert until(lambda: any(l["notification"].get("readState") == "read" for l in agent_user_events(agent, fourth_id)), timeout=10)
    click(lambda: item(driver, first).find_element(By.CSS_SELECTOR, "button.delete"))
    assert until(lambda: item(driver, first) is None, timeout=10)
    assert until(lambda: any(l.get("event") == "user.deleted" for l in agent_user_events(agent, first)), timeout=10)
    post_user_notification(hub, "erin", "order-5", "Rate your delivery", "Tell us how it went")
    assert until(lambda: text(driver, "unread") == "1", timeout=10)
    screenshot(driver, "inbox.png")


def test_inbox_renews_a_short_lived_token_at_half_its_life(browser):
    """With userTokenLifetime at 30 s, the page asks for a new token once half of it is gone, not
    every few seconds."""
    hub = Hub(prefix="nh-web-short-", settings={"NH_USER_TOKEN_LIFETIME": "30"})
    try:
        for name in Hub.SERVICES:
            hub.start(name)
        assert wait_until(lambda: answers(hub))
        driver = browser
        driver.get(f"{hub.base}/inbox")
        driver.execute_script("""
            window.tokenTrades = 0;
            const original = window.fetch;
            window.fetch = (url, options) => {
                if (String(url).includes("users/tokens")) window.tokenTrades += 1;
                return original(url, options);
            };""")
        type_into(driver, "credential", credential(hub, "zoe"))
        driver.find_element(By.ID, "signin-button").click()
        assert until(lambda: text(driver, "who") == "signed in as zoe", timeout=10)
        time.sleep(12)
        assert driver.execute_script("return window.tokenTrades") == 1
        assert until(lambda: driver.execute_script("return window.tokenTrades") == 2, timeout=15)
    finally:
        hub.stop_all()


def test_console_over_plain_http_from_another_machine_signs_in_through_the_gateway(web_hub, remote_browser):
    hub, driver = web_hub, remote_browser
    driver.get(f"http://hub.test:{hub.http_port}/console")
    assert driver.execute_script("return window.isSecureContext") is False
    assert driver.execute_script("return Boolean(window.crypto && window.crypto.subtle)") is False
    # The page says, before the key is typed, that the gateway will sign for it, and why.
    assert visible(driver, "insecure") and "secure context" in text(driver, "insecure")
    type_into(driver, "connection", connection_string(hub, key="d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXkgd3Jvbmc="))
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: visible(driver, "signin-error") and "401" in text(driver, "signin-error"), timeout=10)
    type_into(driver, "connection", connection_string(hub))
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: visible(driver, "app"), timeout=10), text(driver, "signin-error")
    assert until(lambda: text(driver, "health-status") == "ok", timeout=15)


def test_pages_work_on_the_hub_a_connection_string_or_credential_names(web_hub, browser):
    """A second hub: the console signed in with its connection string (EntityPath) works on it, and
    the inbox signed in with a credential of its user shows that user's notifications, not those of
    the default hub's user of the same name."""
    hub, driver = web_hub, browser
    made = nhctl(hub, "--json", "hub", "create", "web-b")
    assert made.returncode == 0, made.stderr
    keys = {json.loads(line)["keyName"]: json.loads(line) for line in nhctl(hub, "--json", "hub", "keys", "web-b").stdout.splitlines()}
    full = keys["DefaultFullSharedAccessSignature"]
    token = sas_token(f"{hub.base}/web-b", "DefaultFullSharedAccessSignature", full["primaryKey"])
    def known():
        r = requests.get(f"{hub.base}/web-b/installations/none?{API}", headers={"Authorization": token})
        return r.status_code == 404 and "no hub" not in r.text

    assert wait_until(known)

    def signed_out(page, field):
        driver.get(f"{hub.base}/{page}")
        if until(lambda: visible(driver, "signout"), timeout=3):
            driver.find_element(By.ID, "signout").click()
        assert until(lambda: visible(driver, field), timeout=10)

    signed_out("console", "connection")
    type_into(driver, "connection", full["primaryConnectionString"])
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: visible(driver, "app"), timeout=10), text(driver, "signin-error")
    assert driver.find_element(By.CSS_SELECTOR, "[data-hub-name]").text == "web-b"
    assert "web-b" in driver.title

    # The same user name in both hubs; the inbox signed in as the second hub's shows its own alone.
    post_user_notification(hub, "frank", "home-1", "For the default hub's frank", "-")
    # Each service reads the hub catalog on its own, within about a second: until the sync store's
    # publish path has, the hub is unknown there (404), and nothing is stored.
    def posted():
        return requests.post(f"{hub.base}/web-b/users/frank/notifications?{API}", headers={"Authorization": token},
                             data=json.dumps({"appNotificationId": "b-1", "visual": {"title": "For web-b's frank", "body": "-"}}))
    assert wait_until(lambda: posted().status_code == 201, timeout=10)
    r = posted()  # the same appNotificationId again: the same notification, replaced
    assert r.status_code == 201, r.text
    theirs = r.json()["notification"]["id"]
    issued = nhctl(hub, "--hub", "web-b", "user", "credential", "frank")
    assert issued.returncode == 0, issued.stderr
    signed_out("inbox", "credential")
    type_into(driver, "credential", issued.stdout.strip())
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: item(driver, theirs) is not None, timeout=10)
    assert driver.find_element(By.CSS_SELECTOR, "[data-hub-name]").text == "web-b"
    assert "For the default hub's frank" not in driver.page_source
    driver.find_element(By.ID, "signout").click()


def test_inbox_pairs_with_a_device_and_opens_encrypted_notifications(web_hub, browser):
    """The inbox as a new device of the user's: paired with the agent on a laptop that holds the
    key (the person compares the confirmation strings), it opens notifications a backend encrypted
    with http_ece, WebCrypto doing the work, and those that come live too. Then, as a device that
    holds the key, it hands it to a new agent, and after the laptop rotates the key it takes the
    keyring the rotation left for it."""
    import base64
    import http_ece
    from cryptography.hazmat.primitives.asymmetric import ec
    hub, driver = web_hub, browser
    user = "gwen"
    laptop = {**hub.env, "NH_AGENT_HOME": os.path.join(hub.data, "gwen-laptop"), "NH_AGENT_INSTALLATION_ID": "gwen-laptop",
              "NH_AGENT_USER_CREDENTIAL": credential(hub, user)}
    made = subprocess.run([os.path.join(BIN, "nh-agent"), "keys", "init"], env=laptop, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr

    def b64url(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    def post_encrypted(app_id, body):
        key = requests.get(f"{hub.base}/hub/users/{user}/key?{API}", headers={"Authorization": hub.token()}, timeout=30).json()
        point = base64.urlsafe_b64decode(key["p256dh"] + "==")
        auth = base64.urlsafe_b64decode(key["auth"] + "==")
        plaintext = json.dumps({"visual": {"title": "Sealed", "body": body}}).encode()
        record = http_ece.encrypt(plaintext, private_key=ec.generate_private_key(ec.SECP256R1()), dh=point, auth_secret=auth, version="aes128gcm")
        r = requests.post(f"{hub.base}/hub/users/{user}/notifications?{API}", headers={"Authorization": hub.token()},
                          data=json.dumps({"appNotificationId": app_id, "encrypted": b64url(record), "keyId": key["keyId"]}), timeout=30)
        assert r.status_code == 201, r.text
        return r.json()["notification"]["id"]

    def confirm_on_page(shown):
        """The person compares the page's confirmation with the agent's and says they match."""
        assert until(lambda: visible(driver, "pair-ask") and text(driver, "pair-confirmation") == shown, timeout=10), \
            (text(driver, "pair-confirmation"), shown)
        driver.find_element(By.ID, "pair-yes").click()

    first = post_encrypted("sealed-1", "the vault opens at dawn")
    driver.get(f"{hub.base}/inbox")
    driver.execute_script("sessionStorage.clear(); localStorage.clear()")
    driver.get(f"{hub.base}/inbox")
    type_into(driver, "credential", credential(hub, user))
    driver.find_element(By.ID, "signin-button").click()
    assert until(lambda: item(driver, first) is not None, timeout=10)
    assert "does not hold the key" in item(driver, first).text and "vault" not in item(driver, first).text

    driver.find_element(By.ID, "pair-button").click()
    assert until(lambda: text(driver, "pair-code"), timeout=10)
    code = text(driver, "pair-code")
    accepting = agentprompt.spawn(laptop, "pair", "accept", code)
    confirm_on_page(agentprompt.after(accepting, "Confirmation:"))
    agentprompt.answer(accepting, "y")
    agentprompt.finish(accepting)
    assert until(lambda: "the vault opens at dawn" in item(driver, first).text, timeout=15), item(driver, first).text
    assert "Paired" in text(driver, "pair-status")

    # One that comes while the page is open opens as it comes.
    second = post_encrypted("sealed-2", "bring the second key")
    assert until(lambda: item(driver, second) is not None and "bring the second key" in item(driver, second).text, timeout=15)
    screenshot(driver, "inbox-encrypted.png")

    # The page, holding the key now, hands it to a new device: the code typed into the page, the
    # strings compared, and the hub's device list signed anew by the page.
    desktop = {**laptop, "NH_AGENT_HOME": os.path.join(hub.data, "gwen-desktop"), "NH_AGENT_INSTALLATION_ID": "gwen-desktop"}
    joining = agentprompt.spawn(desktop, "pair")
    code = agentprompt.after(joining, "Pairing code:")
    assert until(lambda: visible(driver, "accept-form"), timeout=5)
    type_into(driver, "accept-code", code)
    driver.find_element(By.ID, "accept-button").click()
    confirm_on_page(agentprompt.after(joining, "Confirmation:"))
    agentprompt.answer(joining, "y")
    agentprompt.finish(joining)
    assert until(lambda: "Sent the key" in text(driver, "pair-status"), timeout=10), text(driver, "pair-status")
    history = subprocess.run([os.path.join(BIN, "nh-agent"), "history"], env=desktop, capture_output=True, text=True, timeout=60)
    assert "the vault opens at dawn" in history.stdout, history.stdout + history.stderr
    listed = subprocess.run([os.path.join(BIN, "nh-agent"), "keys"], env=desktop, capture_output=True, text=True, timeout=60).stdout
    assert "gwen-desktop" in listed and "browser-" in listed and "not signed" not in listed, listed

    # The laptop rotates the key: the page takes the keyring the rotation sealed for it, and opens
    # what comes for the new key as well as what came before.
    rotated = subprocess.run([os.path.join(BIN, "nh-agent"), "keys", "rotate"], env=laptop, capture_output=True, text=True, timeout=60)
    assert rotated.returncode == 0 and "sealed for 2 other devices" in rotated.stdout, rotated.stdout + rotated.stderr
    third = post_encrypted("sealed-3", "the new key works")
    assert until(lambda: item(driver, third) is not None and "the new key works" in item(driver, third).text, timeout=15), \
        item(driver, third) and item(driver, third).text
    assert "the vault opens at dawn" in item(driver, first).text
