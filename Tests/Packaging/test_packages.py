"""The Debian packages as an operator gets them (make deb): what lintian says of them, what each
installs with which modes, what they depend on, their units, and their executables started from the
unpacked package with the Swift toolchain out of reach. And make install into other prefixes."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Support"))

from hubharness import ROOT, free_port, wait_until  # noqa: E402

SERVICES = ["nh-registry", "nh-publish", "nh-dispatch", "nh-sync", "nh-gateway", "nhctl"]
UNITS = ["nh-registry", "nh-publish", "nh-dispatch", "nh-sync", "nh-gateway"]
# What the hub needs at run time, by the library's Debian package.
SERVICE_LIBRARIES = ["libzmq5", "libsqlite3-0", "libpq5", "libmicrohttpd12", "libcurl4", "libssl3"]
AGENT_LIBRARIES = ["libzmq5", "libsqlite3-0", "libssl3", "libsystemd0"]


def version():
    source = open(os.path.join(ROOT, "Modules/ServiceKit/ServiceContext.swift")).read()
    return re.search(r'public static let current = "([^"]+)"', source).group(1)


def head_commit():
    return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    """The two packages: those in NH_DEB_DIR (make test builds them first), else built here."""
    folder = os.environ.get("NH_DEB_DIR")
    if not folder:
        folder = str(tmp_path_factory.mktemp("deb"))
        subprocess.run(["make", "-s", "deb", f"DEB_DIR={folder}"], cwd=ROOT, check=True)
    found = {os.path.basename(path).split("_")[0]: path for path in glob.glob(os.path.join(folder, "*.deb"))}
    assert set(found) == {"notification-hub", "nh-agent"}, found
    return found


@pytest.fixture(scope="module")
def unpacked(debs, tmp_path_factory):
    """Each package unpacked into a folder of its own, as dpkg -x does."""
    folders = {}
    for name, deb in debs.items():
        folder = str(tmp_path_factory.mktemp(name))
        subprocess.run(["dpkg-deb", "-x", deb, folder], check=True)
        folders[name] = folder
    return folders


def field(deb, name):
    return subprocess.run(["dpkg-deb", "-f", deb, name], capture_output=True, text=True, check=True).stdout.strip()


def contents(deb):
    """{path: (mode string, owner, link target or None)} of a package's files."""
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    entries = {}
    for line in listing.splitlines():
        mode, owner, _size, _date, _time, path = line.split(None, 5)
        path, _, target = path.partition(" -> ")
        entries[path[1:].rstrip("/") or "/"] = (mode, owner, target or None)
    return entries


def owners(path):
    """The Debian packages that hold a library, by any of its names (with /usr merged, dpkg may know
    /lib/x86_64-linux-gnu/libm.so.6 but not /usr/lib/x86_64-linux-gnu/libm.so.6, or the other way)."""
    real = os.path.realpath(path)
    for candidate in dict.fromkeys([path, real, real.removeprefix("/usr"), "/usr" + real, path.removeprefix("/usr"), "/usr" + path]):
        answer = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if answer.returncode == 0:
            return {entry.split(":")[0] for entry in answer.stdout.split(": ")[0].split(", ")}
    return set()


def test_lintian_reports_neither_errors_nor_warnings(debs):
    result = subprocess.run(["lintian", "--no-tag-display-limit", *debs.values()], capture_output=True, text=True, timeout=300)
    tags = [line for line in result.stdout.splitlines() if re.match(r"^[EW]: ", line)]
    assert tags == [], "\n".join(tags)


def test_each_package_installs_its_files_with_their_modes(debs):
    web = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "Services/Gateway/Web/*")))
    hub = contents(debs["notification-hub"])
    expected = {
        "/usr/bin/nh-services", "/etc/nh/hub.json",
        "/usr/lib/sysusers.d/notification-hub.conf", "/usr/lib/tmpfiles.d/notification-hub.conf",
        "/usr/share/bash-completion/completions/nhctl",
        "/usr/share/doc/notification-hub/copyright", "/usr/share/doc/notification-hub/changelog.gz",
        "/usr/share/man/man1/nh-services.1.gz",
    } | {f"/usr/bin/{name}" for name in SERVICES} | {f"/lib/systemd/system/{unit}.service" for unit in UNITS} \
      | {f"/usr/share/nh/web/{name}" for name in web} | {f"/usr/share/man/man1/{name}.1.gz" for name in SERVICES}
    assert {path for path, (mode, _, _) in hub.items() if not mode.startswith("d")} == expected
    agent = contents(debs["nh-agent"])
    assert {path for path, (mode, _, _) in agent.items() if not mode.startswith("d")} == {
        "/usr/bin/nh-agent", "/etc/nh/agent.json", "/lib/systemd/system/nh-agent.service",
        "/usr/lib/systemd/user/nh-agent.service", "/usr/share/dbus-1/services/org.unifiedpush.Distributor.nh.service",
        "/usr/share/applications/nh-agent.desktop", "/usr/share/icons/hicolor/scalable/apps/nh-agent.svg",
        "/usr/share/bash-completion/completions/nh-agent",
        "/usr/share/doc/nh-agent/copyright", "/usr/share/doc/nh-agent/changelog.gz", "/usr/share/man/man1/nh-agent.1.gz"}
    for entries in (hub, agent):
        for path, (mode, owner, target) in entries.items():
            assert owner == "root/root", (path, owner)
            if mode.startswith("d"):
                assert mode == "drwxr-xr-x", (path, mode)
            elif mode.startswith("l"):
                assert target == "nh-services" and path in {f"/usr/bin/{name}" for name in SERVICES}, (path, target)
            elif path in ("/usr/bin/nh-services", "/usr/bin/nh-agent"):
                assert mode == "-rwxr-xr-x", (path, mode)
            else:
                assert mode == "-rw-r--r--", (path, mode)


def test_control_fields_version_depends_and_conffiles(debs, unpacked, tmp_path):
    for name, deb in debs.items():
        assert field(deb, "Package") == name
        assert field(deb, "Version") == version()
        assert field(deb, "Architecture") == subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
        assert field(deb, "Maintainer") and field(deb, "Description")
        depends = {re.split(r"[ (]", part.strip())[0] for part in field(deb, "Depends").split(",")}
        for library in (SERVICE_LIBRARIES if name == "notification-hub" else AGENT_LIBRARIES):
            assert library in depends, (name, library, depends)
        # Every library an executable loads comes from a package it depends on.
        for executable in glob.glob(os.path.join(unpacked[name], "usr/bin/*")):
            if os.path.islink(executable):
                continue
            for line in subprocess.run(["ldd", executable], capture_output=True, text=True, check=True).stdout.splitlines():
                match = re.search(r"=> (/\S+)", line)
                if not match:
                    continue
                needed = os.path.basename(match.group(1))
                if needed not in subprocess.run(["readelf", "-d", executable], capture_output=True, text=True).stdout:
                    continue  # loaded for another library, which brings it
                packages = owners(match.group(1))
                assert packages & depends, (name, needed, packages, depends)
        control = str(tmp_path / name)
        subprocess.run(["dpkg-deb", "-e", deb, control], check=True)
        conffiles = open(os.path.join(control, "conffiles")).read().split()
        assert conffiles == (["/etc/nh/hub.json"] if name == "notification-hub" else ["/etc/nh/agent.json"])
        for script in ("postinst", "prerm", "postrm"):
            path = os.path.join(control, script)
            assert os.stat(path).st_mode & 0o777 == 0o755
            assert subprocess.run(["sh", "-n", path]).returncode == 0, script


def hidden_toolchain(command):
    """`command` (a shell line) in a mount namespace where /opt/swift is an empty folder, with an empty
    environment but PATH: nothing of the Swift toolchain can be found."""
    script = "mount -t tmpfs nothing /opt/swift && " + command
    prefix = ["unshare", "--mount", "--propagation", "private"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    return prefix + ["env", "-i", "PATH=/usr/bin:/bin", "sh", "-c", script]


def test_executables_run_with_the_toolchain_out_of_reach(unpacked):
    commit = head_commit()
    for name, folder in unpacked.items():
        bin_dir = os.path.join(folder, "usr/bin")
        for executable in glob.glob(os.path.join(bin_dir, "*")):
            if os.path.islink(executable):
                continue
            dynamic = subprocess.run(["readelf", "-d", executable], capture_output=True, text=True, check=True).stdout
            assert "RPATH" not in dynamic and "RUNPATH" not in dynamic, executable
            libraries = subprocess.run(["ldd", executable], capture_output=True, text=True, check=True).stdout
            assert "not found" not in libraries and "/opt/swift" not in libraries and "swift" not in libraries, libraries
        names = ["nh-agent"] if name == "nh-agent" else ["nh-services"] + SERVICES
        lines = " && ".join(f"{os.path.join(bin_dir, n)} --version" for n in names)
        result = subprocess.run(hidden_toolchain(f"ls /opt/swift | wc -l && {lines}"), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        output = result.stdout.splitlines()
        assert output[0] == "0", "/opt/swift was not hidden"
        for n, line in zip(names, output[1:]):
            assert re.fullmatch(rf"{n} {re.escape(version())} \(commit [0-9a-f]{{12}}(-modified)?\)", line), line
            assert commit and line.split("commit ")[1].startswith(commit), (line, commit)
        # Unpacked, the executables find the package's config (ROOT/etc/nh), as installed ones find /etc/nh.
        checks = ["nh-agent"] if name == "nh-agent" else UNITS
        lines = " && ".join(f"{os.path.join(bin_dir, n)} --check-config" for n in checks)
        result = subprocess.run(hidden_toolchain(lines), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split("\n")[:-1] == [f"{n}: config ok" for n in checks]
    config = subprocess.run(hidden_toolchain(os.path.join(unpacked["notification-hub"], "usr/bin/nhctl") + " config"),
                            capture_output=True, text=True, timeout=60)
    assert config.returncode == 0 and '"dataDir" : "/var/lib/nh"' in config.stdout, config.stdout + config.stderr


def test_the_unpacked_gateway_serves_the_installed_pages(unpacked, tmp_path):
    port = free_port()
    gateway = os.path.join(unpacked["notification-hub"], "usr/bin/nh-gateway")
    settings = f"NH_DATA_DIR={tmp_path} NH_GATEWAY_LISTEN=127.0.0.1:{port} NH_GATEWAY_REQUESTS=tcp://127.0.0.1:{free_port()}"
    process = subprocess.Popen(hidden_toolchain(f"exec env {settings} {gateway}"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def page():
            try:
                return requests.get(f"http://127.0.0.1:{port}/console", timeout=2)
            except requests.RequestException:
                return None
        assert wait_until(lambda: page() is not None, timeout=30)
        answer = page()
        assert answer.status_code == 200 and "<html" in answer.text.lower(), answer.text[:200]
        script = requests.get(f"http://127.0.0.1:{port}/web/console.js", timeout=2)
        assert script.status_code == 200
        assert script.content == open(os.path.join(ROOT, "Services/Gateway/Web/console.js"), "rb").read()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_units_pass_systemd_analyze_verify(unpacked, tmp_path):
    # The system units in a root holding both packages and the host's own units (for the targets they name).
    root = str(tmp_path / "root")
    for folder in unpacked.values():
        shutil.copytree(folder, root, symlinks=True, dirs_exist_ok=True)
    shutil.copytree("/lib/systemd/system", os.path.join(root, "lib/systemd/system"), symlinks=True, dirs_exist_ok=True,
                    ignore_dangling_symlinks=True)
    units = [os.path.join(root, "lib/systemd/system", f"{unit}.service") for unit in UNITS + ["nh-agent"]]
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={root}", *units], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr
    # The user unit, with its executable at the unpacked path, in a user manager of its own.
    user_unit = str(tmp_path / "nh-agent.service")
    text = open(os.path.join(unpacked["nh-agent"], "usr/lib/systemd/user/nh-agent.service")).read()
    open(user_unit, "w").write(text.replace("/usr/bin/", os.path.join(unpacked["nh-agent"], "usr/bin") + "/"))
    runtime = tempfile.mkdtemp(prefix="nh-xdg-")
    os.chmod(runtime, 0o700)
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", "--user", user_unit], capture_output=True, text=True,
                            env={**os.environ, "XDG_RUNTIME_DIR": runtime}, timeout=120)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def completions(script, function, words):
    line = " ".join(f"'{w}'" for w in words)
    result = subprocess.run(["bash", "-c", f'source "{script}"; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; {function}; '
                             'printf "%s\\n" "${COMPREPLY[@]}"'], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_completions_offer_every_command_the_usage_names(unpacked):
    hub = os.path.join(unpacked["notification-hub"], "usr")
    usage = subprocess.run([os.path.join(hub, "bin/nhctl"), "--help"], capture_output=True, text=True).stdout
    section = usage.split("Commands:")[1].split("\n\n")[0]
    commands = set(re.findall(r"^  ([a-z]+)\b", section, re.M))
    script = os.path.join(hub, "share/bash-completion/completions/nhctl")
    offered = completions(script, "_nhctl", ["nhctl", ""])
    assert commands and commands <= offered, commands - offered
    for command in ("installations", "user", "pns", "hub"):
        # "installations list [...] | show ID | delete ID" names three on one line.
        lines = re.findall(rf"^  {command} (.*)$", section, re.M)
        subcommands = {line.split()[0] for line in lines} | {s for line in lines for s in re.findall(r"\| ([a-z]+) ", line)}
        assert subcommands <= completions(script, "_nhctl", ["nhctl", command, ""]), (command, subcommands)
    services = set(re.findall(r"^  pns set ([a-z]+) ", section, re.M))
    assert services == {"apple", "fcm", "browser", "wns", "adm", "baidu"}, services
    assert completions(script, "_nhctl", ["nhctl", "pns", "set", ""]) == services
    for service, option in (("apple", "--key-file"), ("fcm", "--service-account"), ("wns", "--secret-file"), ("adm", "--secret-file")):
        # The option's value is a file: offered by name from the working directory, never as words.
        assert completions(script, "_nhctl", ["nhctl", "pns", "set", service, option, "/etc/host"]) >= {"/etc/hostname"}
    assert "--title" in completions(script, "_nhctl", ["nhctl", "user", "post", "--t"])
    assert "--yes" in completions(script, "_nhctl", ["nhctl", "hub", "delete", "--y"])
    assert completions(script, "_nhctl", ["nhctl", "--hub", "news", "hub", ""]) >= {"create", "list", "limits"}

    agent = os.path.join(unpacked["nh-agent"], "usr")
    usage = subprocess.run([os.path.join(agent, "bin/nh-agent"), "--help"], capture_output=True, text=True).stdout
    # "nh-agent read|dismiss|activate|snooze|delete ID" names five.
    commands = {c for words in re.findall(r"^  nh-agent ([a-z|]+)", usage, re.M) for c in words.split("|")}
    offered = completions(os.path.join(agent, "share/bash-completion/completions/nh-agent"), "_nh_agent", ["nh-agent", ""])
    assert commands and commands <= offered, commands - offered


def test_make_install_follows_prefix_and_destdir_and_keeps_a_config(tmp_path):
    destdir = str(tmp_path / "stage")
    install = ["make", "-s", "--no-print-directory", "install", "INSTALL_NEEDS=", f"DESTDIR={destdir}", "PREFIX=/opt/nh"]
    subprocess.run(install, cwd=ROOT, check=True, capture_output=True)
    prefix = os.path.join(destdir, "opt/nh")
    unit = open(os.path.join(prefix, "lib/systemd/system/nh-dispatch.service")).read()
    assert "ExecStart=/opt/nh/bin/nh-dispatch --config /opt/nh/etc/nh/hub.json" in unit
    assert "ExecStart=/opt/nh/bin/nh-agent" in open(os.path.join(prefix, "lib/systemd/user/nh-agent.service")).read()
    activation = open(os.path.join(prefix, "share/dbus-1/services/org.unifiedpush.Distributor.nh.service")).read()
    assert "Exec=/opt/nh/bin/nh-agent" in activation and "SystemdService=nh-agent.service" in activation
    for path in ["bin/nh-services", "bin/nhctl", "bin/nh-agent", "share/nh/web/console.html", "share/applications/nh-agent.desktop",
                 "share/icons/hicolor/scalable/apps/nh-agent.svg", "lib/sysusers.d/notification-hub.conf",
                 "lib/tmpfiles.d/notification-hub.conf", "etc/nh/hub.json", "etc/nh/agent.json",
                 "share/bash-completion/completions/nhctl", "share/bash-completion/completions/nh-agent", "share/man/man1/nhctl.1.gz"]:
        assert os.path.exists(os.path.join(prefix, path)), path
    # The installed nhctl reads PREFIX/etc/nh/hub.json; an operator's edits survive installing again.
    config = os.path.join(prefix, "etc/nh/hub.json")
    open(config, "w").write('{"dataDir": "/srv/hub"}\n')
    subprocess.run(install, cwd=ROOT, check=True, capture_output=True)
    assert open(config).read() == '{"dataDir": "/srv/hub"}\n'
    shown = subprocess.run([os.path.join(prefix, "bin/nhctl"), "config"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert '"dataDir" : "/srv/hub"' in shown.stdout, shown.stdout + shown.stderr
