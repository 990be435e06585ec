"""Bulk jobs as an operator meets them: a file of 10,000 installations, some of them bad, imported
with POST /{hub}/jobs in Notification Hubs' own shape while every service is killed in turn (the
registration service in the middle of a batch's transaction), and the result checked line by
line: every good line applied once, every bad one reported once with its line number and why.
Then nhctl: an upsert, a delete and an export with its progress, and the refusals."""
import json
import os
import re
import signal
import subprocess
import xml.etree.ElementTree as ET

import pytest
import requests

from conftest import BIN, Hub, answers, wait_until
from hubharness import stopped

API = "api-version=2015-01"
NS = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
ROWS = 10_000


@pytest.fixture(scope="module")
def hub():
    hub = Hub(prefix="nh-jobs-", settings={"NH_LIMITS_JOB_BATCH_LINES": "500"})
    pause = os.path.join(hub.data, "pause-registry")
    hub.registry_env = {"NH_FAULT_PAUSE": pause}
    hub.pause = pause
    for name in Hub.SERVICES:
        hub.start(name, env=hub.registry_env if name == "nh-registry" else None)
    assert wait_until(lambda: os.path.exists(os.path.join(hub.data, "keys.json")))
    assert wait_until(lambda: answers(hub))
    yield hub
    hub.stop_all()


def request(hub, method, path, body=None, headers=None):
    return requests.request(method, f"{hub.base}/hub/{path}{'&' if '?' in path else '?'}{API}",
                            headers={"Authorization": hub.token(), **(headers or {})}, data=body, timeout=15)


def job_entry(type_, import_file, output):
    """A job as the Notification Hubs SDKs post it."""
    return f"""<?xml version="1.0" encoding="utf-8"?>
<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/atom+xml;type=entry;charset=utf-8">
<NotificationHubJob xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="{NS}">
<Type>{type_}</Type><OutputContainerUri>file://{output}</OutputContainerUri><ImportFileUri>file://{import_file}</ImportFileUri>
</NotificationHubJob></content></entry>"""


def read_job(text):
    """The NotificationHubJob of an Atom entry, its members by name and its OutputProperties as a dict."""
    job = ET.fromstring(text).find(f".//{{{NS}}}NotificationHubJob")
    assert job is not None, text
    fields = {child.tag.split("}")[1]: child.text for child in job}
    arrays = "{http://schemas.microsoft.com/2003/10/Serialization/Arrays}"
    fields["OutputProperties"] = {
        pair.find(f"{arrays}Key").text: pair.find(f"{arrays}Value").text
        for pair in job.find(f"{{{NS}}}OutputProperties").findall(f"{arrays}KeyValueOfstringstring")}
    return fields


def import_file(path):
    """10,000 lines: installations as JSON and registrations as XML, with bad lines among them.
    Returns the expected failures by line number (their codes) and the ids of the good lines."""
    bad = {}
    good = []
    lines = []
    for i in range(ROWS):
        number = i + 1
        kind = i % 4
        if i % 400 == 7:
            lines.append('{"installationId": "broken-' + str(i))  # not JSON
            bad[number] = "invalid_payload"
        elif i % 400 == 107:
            lines.append(json.dumps({"installationId": f"imp-{i}", "platform": "linux", "pushChannel": "k", "tags": ["bad tag!"]}))
            bad[number] = "invalid_tag"
        elif i % 400 == 207:
            lines.append(json.dumps({"installationId": f"imp-{i}", "platform": "linux", "pushChannel": "k", "colour": "red"}))
            bad[number] = "unknown_field"
        elif i % 400 == 307:
            # The same id as a line before: ImportCreateRegistrations refuses the second.
            lines.append(json.dumps({"installationId": f"imp-{i - 1}", "platform": "linux", "pushChannel": "k", "tags": ["imported"]}))
            bad[number] = "conflict"
        elif i % 400 == 308:
            lines.append(f'<GcmRegistrationDescription xmlns="{NS}"><RegistrationId>imp-{i}</RegistrationId><Tags>imported</Tags></GcmRegistrationDescription>')
            bad[number] = "invalid_argument"  # no GcmRegistrationId
        elif kind == 0:
            lines.append(json.dumps({"installationId": f"imp-{i}", "platform": "linux", "pushChannel": f"device-{i}",
                                     "tags": ["imported", f"group-{i % 10}"]}))
            good.append(f"imp-{i}")
        elif kind == 1:
            lines.append(f'<FcmV1RegistrationDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="{NS}">'
                         f'<RegistrationId>imp-{i}</RegistrationId><Tags>imported,group-{i % 10}</Tags>'
                         f'<FcmV1RegistrationId>token-{i}</FcmV1RegistrationId></FcmV1RegistrationDescription>')
            good.append(f"imp-{i}")
        elif kind == 2:
            lines.append(f'<AppleTemplateRegistrationDescription xmlns="{NS}"><RegistrationId>imp-{i}</RegistrationId>'
                         f'<Tags>imported</Tags><DeviceToken>{i:064x}</DeviceToken>'
                         '<BodyTemplate><![CDATA[{"aps":{"alert":"$(message)"}}]]></BodyTemplate></AppleTemplateRegistrationDescription>')
            good.append(f"imp-{i}")
        else:
            lines.append(json.dumps({"installationId": f"imp-{i}", "platform": "fcmv1", "pushChannel": f"token-{i}", "tags": ["imported"]}))
            good.append(f"imp-{i}")
        if i % 1000 == 500:
            lines.append("")  # a blank line is skipped, and still counted
    # Blank lines shift the numbers after them: count them as the file has them.
    numbered, bad_by_line, at = [], {}, 0
    index = 0
    for line in lines:
        at += 1
        numbered.append(line)
        if line == "":
            continue
        original = index + 1
        if original in bad:
            bad_by_line[at] = bad[original]
        index += 1
    with open(path, "w") as f:
        f.write("\n".join(numbered) + "\n")
    return bad_by_line, good


def job_state(hub, job_id):
    r = request(hub, "GET", f"jobs/{job_id}")
    assert r.status_code == 200, r.text
    return read_job(r.text)


def count_imported(hub):
    """The installations the registry holds with tag imported, through the registrations API."""
    total, token = 0, None
    while True:
        headers = {"X-MS-ContinuationToken": token} if token else {}
        r = request(hub, "GET", "tags/imported/registrations?$top=1000", headers=headers)
        assert r.status_code == 200, r.text
        total += r.text.count("<entry")
        token = r.headers.get("X-MS-ContinuationToken")
        if not token:
            return total


def test_an_import_of_10000_lines_applies_each_good_line_once_across_a_kill_of_every_service(hub):
    source = os.path.join(hub.data, "import.txt")
    output = os.path.join(hub.data, "jobs")
    bad, good = import_file(source)
    assert len(bad) == 125 and len(good) == ROWS - 125

    # The registration service stops itself inside the first batch's transaction; it is killed there.
    with open(hub.pause, "w") as f:
        f.write("jobBatch")
    r = request(hub, "POST", "jobs", job_entry("ImportCreateRegistrations", source, output),
                headers={"Content-Type": "application/atom+xml;type=entry;charset=utf-8"})
    assert r.status_code == 201, r.text
    created = read_job(r.text)
    job_id = created["JobId"]
    assert created["Type"] == "ImportCreateRegistrations" and created["Status"] in ("Started", "Running")
    assert r.headers["Location"].split("?")[0].endswith(f"/hub/jobs/{job_id}")
    registry = hub.processes["nh-registry"]
    assert wait_until(lambda: stopped(registry.pid), timeout=30), hub.describe("nh-registry")
    hub.kill("nh-registry")
    hub.start("nh-registry", env=hub.registry_env)
    assert wait_until(lambda: request(hub, "GET", f"jobs/{job_id}").status_code == 200, timeout=30)

    # Once some batches have committed, the registration service is killed again between them or
    # in one (wherever it is), and every other service is killed and started again while it runs.
    assert wait_until(lambda: int(job_state(hub, job_id)["OutputProperties"]["ProcessedLines"]) >= 1_000, timeout=60)
    os.kill(hub.processes["nh-registry"].pid, signal.SIGSTOP)
    hub.kill("nh-registry")
    hub.start("nh-registry", env=hub.registry_env)
    progress = []
    for name in ["nh-gateway", "nh-dispatch", "nh-publish", "nh-sync"]:
        hub.kill(name)
        hub.start(name)
        assert wait_until(lambda: answers(hub), timeout=30), hub.describe(name)
        progress.append(float(job_state(hub, job_id)["Progress"]))

    assert wait_until(lambda: job_state(hub, job_id)["Status"] in ("Completed", "Failed"), timeout=120)
    done = job_state(hub, job_id)
    assert done["Status"] == "Completed", done
    assert float(done["Progress"]) == 100 and progress == sorted(progress)
    properties = done["OutputProperties"]
    assert int(properties["AppliedLines"]) == len(good)
    assert int(properties["FailedLines"]) == len(bad)
    assert int(properties["ProcessedLines"]) == len(good) + len(bad)

    # Failed.txt: each bad line once, in order, with its code and what to fix.
    failed_path = properties["FailedFilePath"].removeprefix("file://")
    assert failed_path == os.path.join(output, job_id, "Failed.txt")
    with open(failed_path) as f:
        failures = [json.loads(line) for line in f]
    assert [(row["line"], row["code"]) for row in failures] == sorted(bad.items())
    assert all(row["message"] for row in failures)
    conflict = next(row for row in failures if row["code"] == "conflict")
    assert "ImportUpsertRegistrations" in conflict["message"]

    # The registry holds each good line once; the dispatcher has every one of them.
    assert count_imported(hub) == len(good)
    r = request(hub, "POST", "messages", json.dumps({"message": "hello"}),
                headers={"Content-Type": "application/json;charset=utf-8", "ServiceBusNotification-Format": "linux",
                         "ServiceBusNotification-Tags": "group-3"})
    assert r.status_code == 201, r.text
    notification = r.headers["Location"].split("/messages/")[1].split("?")[0]
    # group-3 is on the good linux lines (every fourth) with i % 10 == 3.
    imported = set(good)
    expected = sum(1 for i in range(ROWS) if i % 10 == 3 and i % 4 == 0 and f"imp-{i}" in imported)
    assert wait_until(lambda: targets(hub, notification) == expected, timeout=30), (targets(hub, notification), expected)


def nhctl(hub, *arguments, cwd=None):
    return subprocess.run([os.path.join(BIN, "nhctl"), *arguments], env=hub.env, capture_output=True, text=True, timeout=120, cwd=cwd)


def targets(hub, notification):
    """The targets the dispatcher counted for a notification."""
    done = nhctl(hub, "outcome", notification, "--json")
    return json.loads(done.stdout).get("targets") if done.returncode == 0 else None


def test_nhctl_upserts_deletes_and_exports_with_a_progress_bar(hub):
    work = os.path.join(hub.data, "nhctl-jobs")
    os.makedirs(work)
    with open(os.path.join(work, "upsert.jsonl"), "w") as f:
        for i in range(3_000):
            f.write(json.dumps({"installationId": f"up-{i}", "platform": "linux", "pushChannel": f"d-{i}", "tags": ["upserted"]}) + "\n")
        f.write(json.dumps({"installationId": "up-bad", "platform": "linux", "pushChannel": "d", "tags": ["no spaces allowed"]}) + "\n")
    # A relative path is taken from where nhctl runs; the lines go to the file's directory.
    done = nhctl(hub, "job", "import", "upsert.jsonl", "--mode", "upsert", cwd=work)
    assert done.returncode == 1, done  # one line failed
    assert re.search(r"Completed, 3000 applied, 1 failed", done.stdout), done.stdout
    # Not a terminal: the progress comes as lines, the last at 100%.
    bars = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert bars and bars[-1].startswith("[" + "#" * 30 + "] 100.0%"), done.stderr
    failed = re.search(r"failed lines: (\S+)", done.stdout).group(1)
    assert failed.startswith(work + "/") and json.loads(open(failed).read())["line"] == 3001

    # The same file again replaces each one: nothing fails but the bad line, and none is doubled.
    again = nhctl(hub, "job", "import", os.path.join(work, "upsert.jsonl"), "--mode", "upsert", "--json")
    assert json.loads(again.stdout)["applied"] == 3000

    with open(os.path.join(work, "delete.txt"), "w") as f:
        f.write("\n".join(f"up-{i}" for i in range(0, 3_000, 2)) + "\nup-nobody\n")
    deleted = nhctl(hub, "job", "import", os.path.join(work, "delete.txt"), "--mode", "delete", "--output", os.path.join(work, "out"), "--json")
    job = json.loads(deleted.stdout)
    assert (job["applied"], job["failed"]) == (1500, 1), deleted
    assert json.loads(open(job["failedFile"]).read())["code"] == "not_found"

    exported = nhctl(hub, "job", "export", os.path.join(work, "export"))
    assert exported.returncode == 0, exported
    output = re.search(r"output: (\S+)", exported.stdout).group(1)
    with open(output) as f:
        rows = [json.loads(line) for line in f]
    ids = {row["installationId"] for row in rows}
    assert {f"up-{i}" for i in range(1, 3_000, 2)} <= ids and not any(f"up-{i}" in ids for i in range(0, 3_000, 2))
    assert all(row["tags"] == ["upserted"] for row in rows if row["installationId"].startswith("up-"))
    # What an export writes, an import takes back.
    listed = nhctl(hub, "job", "list")
    assert listed.stdout.count("ExportRegistrations  Completed") == 1 and listed.stdout.count("ImportUpsertRegistrations") == 2
    job_id = re.search(r"job (\S+): Completed", exported.stdout).group(1)
    shown = nhctl(hub, "job", "show", job_id, "--json")
    assert json.loads(shown.stdout)["outputFile"] == output


def test_a_job_that_cannot_run_is_refused_with_what_to_fix(hub):
    def post(body, content_type="application/atom+xml;type=entry;charset=utf-8", token=None):
        return requests.post(f"{hub.base}/hub/jobs?{API}", data=body, timeout=10,
                             headers={"Authorization": token or hub.token(), "Content-Type": content_type})

    missing = os.path.join(hub.data, "no-such-file.txt")
    cases = [
        (job_entry("ImportCreateRegistrations", missing, hub.data), 400, "invalid_argument", "not a file the registration service can read"),
        (job_entry("ImportEverything", missing, hub.data), 400, "invalid_argument", "Type must be one of"),
        (job_entry("ImportCreateRegistrations", "relative.txt", hub.data).replace("file://relative.txt", "relative.txt"), 400,
         "invalid_argument", "is not absolute"),
        ("<entry><content><NotificationHubJob><Type>ExportRegistrations</Type><Colour>red</Colour></NotificationHubJob></content></entry>",
         400, "unknown_field", "no &lt;Colour&gt;"),
        ("not xml", 400, "invalid_payload", "NotificationHubJob"),
        (json.dumps({"type": "ExportRegistrations", "outputContainerUri": f"file://{hub.data}/x", "importFileUri": f"file://{missing}"}),
         400, "invalid_argument", "an export reads no file"),
    ]
    for body, status, code, words in cases:
        r = post(body, "application/json" if body.startswith("{") else "application/atom+xml")
        assert r.status_code == status and code in r.text and words in r.text, (body[:80], r.status_code, r.text)
    # Jobs need Manage: a Listen key is refused.
    listen = hub.token("DefaultListenSharedAccessSignature")
    r = post(json.dumps({"type": "ExportRegistrations", "outputContainerUri": hub.data}), "application/json", token=listen)
    assert r.status_code in (401, 403), r.text
    # A job the hub does not have.
    r = request(hub, "GET", "jobs/nothing-here")
    assert r.status_code == 404 and "no job" in r.text
    # The service is still up, and a JSON body with a JSON answer works.
    r = post(json.dumps({"type": "ExportRegistrations", "outputContainerUri": os.path.join(hub.data, "json-export")}), "application/json")
    assert r.status_code == 201, r.text
    r = request(hub, "GET", f"jobs/{read_job(r.text)['JobId']}", headers={"Accept": "application/json"})
    assert r.json()["type"] == "ExportRegistrations"
