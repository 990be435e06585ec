# Notification hub: build, test, run and benchmark.
# `make run` and `make test` work on a fresh Debian machine: they install what is missing first.

SWIFT        ?= swift
DATA_DIR     ?= $(or $(NH_DATA_DIR),$(CURDIR)/data)
APT_PACKAGES := libzmq3-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev libmosquitto-dev libpq-dev pkg-config openssl curl mosquitto mosquitto-clients postgresql \
                chromium chromium-driver \
                libsystemd-dev xvfb dunst libnotify-bin python3-gi gir1.2-glib-2.0 python3-venv \
                xfce4-notifyd notification-daemon mate-notification-daemon xdotool imagemagick \
                dpkg-dev lintian patchelf help2man systemd debootstrap faketime python3-zmq valgrind
# What make test-gnome needs besides APT_PACKAGES: GNOME Shell and gjs (its notification helper is a gjs program).
GNOME_APT_PACKAGES := gnome-shell gjs
PY_PACKAGES  := pytest requests pyzmq selenium matplotlib h2 http-ece py-vapid cryptography jeepney pywebpush
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RELEASE_BIN   = $(CURDIR)/.build/release
DEBUG_BIN     = $(CURDIR)/.build/debug
FUZZ_FRAMES  ?= 1000000
BENCH_DIR    ?= $(CURDIR)/bench
# make install: where the files go (DESTDIR stages them). An installed executable finds the config in
# SYSCONFDIR/nh and the web pages in DATADIR/nh/web from where it is (ServiceKit's InstallLayout).
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
DATADIR      ?= $(PREFIX)/share
SYSCONFDIR   ?= $(if $(filter /usr /usr/local,$(PREFIX)),/etc,$(if $(filter %/usr,$(PREFIX)),$(PREFIX:%/usr=%/etc),$(PREFIX)/etc))
UNITDIR      ?= $(PREFIX)/lib/systemd/system
USERUNITDIR  ?= $(PREFIX)/lib/systemd/user
DBUSSERVICEDIR ?= $(PREFIX)/share/dbus-1/services
APPLICATIONSDIR ?= $(PREFIX)/share/applications
ICONDIR      ?= $(PREFIX)/share/icons/hicolor/scalable/apps
SYSUSERSDIR  ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR  ?= $(PREFIX)/lib/tmpfiles.d
COMPLETIONSDIR ?= $(DATADIR)/bash-completion/completions
MANDIR       ?= $(DATADIR)/man
STATIC_BIN    = $(CURDIR)/.build/static/release
DEB_DIR      ?= $(CURDIR)/.build/deb
# What the install targets build first; build-deb.sh, run after make static, needs nothing.
INSTALL_NEEDS ?= static
SERVICE_LINKS := nh-registry nh-publish nh-dispatch nh-sync nh-gateway nhctl
STAMP        := Modules/CBuildInfo/build_stamp.h

.PHONY: all deps stamp build release static install install-services install-agent manual-pages deb upgrade-test package-test test test-gnome soak fuzz run bench bench-instructions screenshots clean help

all: build

help:
	@echo "make deps     install missing Debian and Python packages"
	@echo "make build    debug build of every module and service"
	@echo "make test     deps, then the whole test suite beside a throwaway PostgreSQL server (Swift with a short parser fuzz; then the REST tests, a one-minute soak, a short socket fuzz, the desktop tests with Xvfb, dbus-daemon and dunst, the store's failover with a streaming replica, and the UnifiedPush tests with app connectors (jeepney and GDBus), pywebpush and a Matrix homeserver (Synapse, installed in its own venv) in Python; then make deb and the packaging tests: lintian, contents, the executables with the toolchain out of reach, units, make install, upgrade folders)"
	@echo "make test-gnome  deps and GNOME Shell 43 (gnome-shell, gjs), debug build, then the agent on GNOME Shell (X11 under Xvfb,"
	@echo "              software GL) as a person uses it: banners clicked with the pointer, a restart of the shell (Tests/Desktop/test_gnome.py)"
	@echo "make soak     deps, debug build, then ten minutes of mixed load while services and agents are killed"
	@echo "make run      deps, release build, then every service on loopback (Ctrl-C stops them)"
	@echo "make bench    deps, release build, then throughput against raw libzmq and Mosquitto; writes $(BENCH_DIR)/results.json"
	@echo "              and $(BENCH_DIR)/chart.png (BENCH_DIR=DIR), and copies the chart to docs/bench-chart.png"
	@echo "make bench-instructions  deps, release build, then the dispatcher's instructions per acknowledged delivery under callgrind, for INSTR_AGENTS (200) agents"
	@echo "make fuzz     deps, debug build, then $(FUZZ_FRAMES) generated and mutated inputs to every socket and to each parser (FUZZ_FRAMES=N)"
	@echo "make screenshots  deps, debug build, then the browser tests, saving the README's pictures of /console and /inbox in docs/screenshots"
	@echo "make static   release build with the Swift runtime linked in: nh-services (every service and nhctl) and nh-agent"
	@echo "make install  static, then install into DESTDIR/PREFIX (default /usr/local): executables, web pages, systemd"
	@echo "              units, sysusers and tmpfiles entries, /etc/nh/hub.json and agent.json when absent, bash completions"
	@echo "              (install-services and install-agent each install one half)"
	@echo "make deb      static, then the Debian packages notification-hub and nh-agent in DEB_DIR (default .build/deb)"
	@echo "make package-test  deb, then install both into a Debian 12 root made by debootstrap, start the installed"
	@echo "              services, send a first notification to the installed agent, upgrade, remove and purge (in make test too)"
	@echo "make upgrade-test  build UPGRADE_FROM (default HEAD~1), write a data folder with it, open it with this build"
	@echo "make clean    remove build products (the data folder stays)"

# Installs the Debian packages $(1) that are missing; apt-get update runs first because a fresh
# machine's lists are empty.
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

# Installs only what is missing.
deps:
	$(call apt_install,$(APT_PACKAGES))
	@python3 -c "import pytest, requests, zmq, selenium, matplotlib, h2, http_ece, py_vapid, cryptography, jeepney, pywebpush" 2>/dev/null || python3 -m pip install -q $(PY_PACKAGES) 2>&1 | grep -v "Running pip as the 'root'" || true

# The commit the executables print with --version; rewritten only when it changes, so that only
# Modules/CBuildInfo is compiled again.
stamp:
	@commit="$$(git rev-parse --short=12 HEAD 2>/dev/null || true)"; \
	if [ -n "$$commit" ] && ! git diff --quiet HEAD -- 2>/dev/null; then commit="$$commit-modified"; fi; \
	line="#define NH_BUILD_COMMIT \"$$commit\""; \
	[ "$$(cat $(STAMP) 2>/dev/null)" = "$$line" ] || echo "$$line" > $(STAMP)

build: deps stamp
	$(SWIFT) build

release: deps stamp
	$(SWIFT) build -c release

# The executables the packages carry: Swift's runtime and Foundation linked in, so that they need only
# Debian's libraries. The services and nhctl are one executable, nh-services, which each name links to.
static: deps stamp
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build/static --product nh-services
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build/static --product nh-agent

# Copies, then strips the symbols and the build folder's search path from the installed executables.
install: install-services install-agent

install-services: $(INSTALL_NEEDS)
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(DATADIR)/nh/web" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(SYSUSERSDIR)" \
	  "$(DESTDIR)$(TMPFILESDIR)" "$(DESTDIR)$(SYSCONFDIR)/nh" "$(DESTDIR)$(COMPLETIONSDIR)"
	install -m 0755 "$(STATIC_BIN)/nh-services" "$(DESTDIR)$(BINDIR)/nh-services"
	strip --strip-unneeded --remove-section=.comment --remove-section=.note "$(DESTDIR)$(BINDIR)/nh-services"
	patchelf --remove-rpath "$(DESTDIR)$(BINDIR)/nh-services"
	for name in $(SERVICE_LINKS); do ln -sf nh-services "$(DESTDIR)$(BINDIR)/$$name"; done
	install -m 0644 Services/Gateway/Web/* "$(DESTDIR)$(DATADIR)/nh/web/"
	for unit in nh-registry nh-publish nh-dispatch nh-sync nh-gateway; do \
	  sed -e 's|/usr/bin/|$(BINDIR)/|g' -e 's|/etc/nh/|$(SYSCONFDIR)/nh/|g' deploy/systemd/$$unit.service > "$(DESTDIR)$(UNITDIR)/$$unit.service"; \
	  chmod 0644 "$(DESTDIR)$(UNITDIR)/$$unit.service"; done
	install -m 0644 deploy/install/notification-hub.sysusers "$(DESTDIR)$(SYSUSERSDIR)/notification-hub.conf"
	install -m 0644 deploy/install/notification-hub.tmpfiles "$(DESTDIR)$(TMPFILESDIR)/notification-hub.conf"
	[ -e "$(DESTDIR)$(SYSCONFDIR)/nh/hub.json" ] || install -m 0644 deploy/install/hub.json "$(DESTDIR)$(SYSCONFDIR)/nh/hub.json"
	install -m 0644 deploy/completions/nhctl.bash "$(DESTDIR)$(COMPLETIONSDIR)/nhctl"
	$(MAKE) --no-print-directory manual-pages BIN="$(DESTDIR)$(BINDIR)" NAMES="nh-services $(SERVICE_LINKS)"

install-agent: $(INSTALL_NEEDS)
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(USERUNITDIR)" "$(DESTDIR)$(DBUSSERVICEDIR)" "$(DESTDIR)$(APPLICATIONSDIR)" "$(DESTDIR)$(ICONDIR)" "$(DESTDIR)$(SYSCONFDIR)/nh" "$(DESTDIR)$(COMPLETIONSDIR)"
	install -m 0755 "$(STATIC_BIN)/nh-agent" "$(DESTDIR)$(BINDIR)/nh-agent"
	strip --strip-unneeded --remove-section=.comment --remove-section=.note "$(DESTDIR)$(BINDIR)/nh-agent"
	patchelf --remove-rpath "$(DESTDIR)$(BINDIR)/nh-agent"
	sed -e 's|/usr/bin/|$(BINDIR)/|g' -e 's|/etc/nh/|$(SYSCONFDIR)/nh/|g' deploy/systemd/nh-agent.service > "$(DESTDIR)$(UNITDIR)/nh-agent.service"
	sed -e 's|/usr/bin/|$(BINDIR)/|g' -e 's|/etc/nh/|$(SYSCONFDIR)/nh/|g' deploy/systemd/user/nh-agent.service > "$(DESTDIR)$(USERUNITDIR)/nh-agent.service"
	sed -e 's|/usr/bin/|$(BINDIR)/|g' deploy/dbus/org.unifiedpush.Distributor.nh.service > "$(DESTDIR)$(DBUSSERVICEDIR)/org.unifiedpush.Distributor.nh.service"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/nh-agent.service" "$(DESTDIR)$(USERUNITDIR)/nh-agent.service" "$(DESTDIR)$(DBUSSERVICEDIR)/org.unifiedpush.Distributor.nh.service"
	install -m 0644 deploy/desktop/nh-agent.desktop "$(DESTDIR)$(APPLICATIONSDIR)/nh-agent.desktop"
	install -m 0644 deploy/desktop/nh-agent.svg "$(DESTDIR)$(ICONDIR)/nh-agent.svg"
	[ -e "$(DESTDIR)$(SYSCONFDIR)/nh/agent.json" ] || install -m 0644 deploy/install/agent.json "$(DESTDIR)$(SYSCONFDIR)/nh/agent.json"
	install -m 0644 deploy/completions/nh-agent.bash "$(DESTDIR)$(COMPLETIONSDIR)/nh-agent"
	$(MAKE) --no-print-directory manual-pages BIN="$(DESTDIR)$(BINDIR)" NAMES="nh-agent"

# A manual page for each of NAMES in BIN, made by help2man from its --help, with its first line as the summary.
manual-pages:
	install -d "$(DESTDIR)$(MANDIR)/man1"
	for name in $(NAMES); do \
	  summary="$$("$(BIN)/$$name" --help | head -n 1 | sed 's/^[^:]*: //')"; \
	  help2man --no-info --no-discard-stderr --name="$$summary" --version-option=--version "$(BIN)/$$name" | \
	    gzip -9n > "$(DESTDIR)$(MANDIR)/man1/$$name.1.gz"; \
	  chmod 0644 "$(DESTDIR)$(MANDIR)/man1/$$name.1.gz"; done

# Two packages, built with dpkg-deb from a staged install (deploy/debian/build-deb.sh).
deb: static
	deploy/debian/build-deb.sh "$(DEB_DIR)"

# A data folder written by the build of UPGRADE_FROM (default: the commit before this one), opened by
# this build (Tests/Packaging/upgrade_data.py). UPGRADE_KEEP=DIR keeps the folder, as the ones in
# Tests/Packaging/upgrade-from-* were kept for make test.
UPGRADE_FROM ?= HEAD~1
upgrade-test: build
	@rm -rf .build/upgrade-from && git worktree add --force --detach .build/upgrade-from "$(UPGRADE_FROM)" >/dev/null
	cd .build/upgrade-from && $(SWIFT) build
	@folder="$${UPGRADE_KEEP:-$$(mktemp -d)/data}"; \
	python3 Tests/Packaging/upgrade_data.py write --bin .build/upgrade-from/.build/debug --data "$$folder" \
	  --commit "$$(git rev-parse --short=12 "$(UPGRADE_FROM)")" && \
	python3 Tests/Packaging/upgrade_data.py check --bin "$(DEBUG_BIN)" --data "$$folder"; \
	status=$$?; git worktree remove --force .build/upgrade-from; exit $$status

# Installs the packages into a Debian 12 root made by debootstrap (kept in .build/package-root/base) and
# uses them as an operator would: Tests/Packaging/package_test.py says how. make test runs it too.
package-test: deb
	python3 Tests/Packaging/package_test.py --debs "$(DEB_DIR)"

# Each half runs beside a throwaway PostgreSQL server (Tests/Support/pgserver.py) named by NH_TEST_POSTGRES.
# The packages are built too (make deb): Tests/Packaging checks them and the upgrade folders, and
# package_test.py installs them on a Debian 12 root (make package-test).
test: deps stamp
	@python3 Tests/Support/synapse.py install 900
	$(SWIFT) build --build-tests
	python3 Tests/Support/pgserver.py run --require -- $(SWIFT) test --skip-build
	$(MAKE) --no-print-directory deb
	NH_BIN_DIR="$(DEBUG_BIN)" NH_DEB_DIR="$(DEB_DIR)" python3 Tests/Support/pgserver.py run --require -- \
	  python3 -m pytest -q Tests/Gateway Tests/Hardening Tests/Desktop Tests/UnifiedPush Tests/Packaging
	python3 Tests/Packaging/package_test.py --debs "$(DEB_DIR)"

# The agent on GNOME Shell (Tests/Desktop/test_gnome.py), too heavy for make test, where it is skipped:
# it runs only with NH_TEST_GNOME=1. GNOME Shell and gjs are installed when missing, as deps does.
test-gnome: deps stamp
	$(call apt_install,$(GNOME_APT_PACKAGES))
	$(SWIFT) build --build-tests
	NH_TEST_GNOME=1 NH_BIN_DIR="$(DEBUG_BIN)" python3 Tests/Support/pgserver.py run --require -- \
	  python3 -m pytest -q Tests/Desktop/test_gnome.py

# Ten minutes of sends, posts and state changes while services and agents are killed with SIGKILL and
# started again; fails when anything accepted was lost, shown twice or misdelivered, or devices disagree.
soak: build
	NH_BIN_DIR="$(DEBUG_BIN)" python3 Tests/Hardening/soak.py --seconds 600

# Starts every service on loopback with a data folder of its own, fuzzes every socket, and exits
# non-zero on any failure (a crash, a hang, memory growth, or malformed input accepted).
fuzz: deps
	$(SWIFT) build --build-tests
	NH_BIN_DIR="$(DEBUG_BIN)" python3 Tests/Hardening/fuzz.py --frames $(FUZZ_FRAMES) --progress
	NH_FUZZ_ITERATIONS=$(FUZZ_FRAMES) $(SWIFT) test --skip-build --filter ParserFuzzTests

run: release
	@NH_DATA_DIR="$(DATA_DIR)" NH_BIN_DIR="$(RELEASE_BIN)" deploy/run-local.sh

# Prints the figures, writes them to BENCH_DIR as results.json and chart.png, and copies the chart to
# docs/bench-chart.png, the one the README shows (matplotlib comes with deps).
bench: release
	@mkdir -p "$(BENCH_DIR)" "$(CURDIR)/docs"
	@NH_BIN_DIR="$(RELEASE_BIN)" deploy/bench.sh --output "$(BENCH_DIR)/results.json"
	python3 deploy/bench-chart.py "$(BENCH_DIR)/results.json" "$(BENCH_DIR)/chart.png"
	cp "$(BENCH_DIR)/chart.png" "$(CURDIR)/docs/bench-chart.png"

# Instructions per acknowledged delivery, the dispatcher under valgrind's callgrind: a figure that
# does not move with the machine's load, for finding regressions that timings here cannot show.
INSTR_AGENTS ?= 200
bench-instructions: release
	"$(RELEASE_BIN)/nh-bench" instructions --fanout $(INSTR_AGENTS)

# The browser tests alone, keeping their screenshots as the README's pictures of the two pages.
screenshots: deps
	$(SWIFT) build
	NH_BIN_DIR="$(DEBUG_BIN)" NH_SCREENSHOT_DIR="$(CURDIR)/docs/screenshots" python3 -m pytest -q Tests/Gateway/test_web.py

clean:
	$(SWIFT) package clean
	rm -rf .build
