# Notification hub: build, test, run and benchmark.
# `make run` and `make test` work on a fresh Debian machine: they install what is missing first.

SWIFT        ?= swift
DATA_DIR     ?= $(CURDIR)/data
APT_PACKAGES := libzmq3-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev libmosquitto-dev libpq-dev pkg-config openssl curl mosquitto mosquitto-clients postgresql \
                chromium chromium-driver \
                libsystemd-dev xvfb dunst libnotify-bin
PY_PACKAGES  := pytest requests pyzmq selenium matplotlib h2 http-ece py-vapid cryptography jeepney pywebpush
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RELEASE_BIN   = $(CURDIR)/.build/release
DEBUG_BIN     = $(CURDIR)/.build/debug
FUZZ_FRAMES  ?= 1000000
BENCH_DIR    ?= $(CURDIR)/bench

.PHONY: all deps build release test soak fuzz run bench screenshots clean help

all: build

help:
	@echo "make deps     install missing Debian and Python packages"
	@echo "make build    debug build of every module and service"
	@echo "make test     deps, then the whole test suite beside a throwaway PostgreSQL server (Swift with a short parser fuzz; then the REST tests, a one-minute soak, a short socket fuzz, the desktop tests with Xvfb, dbus-daemon and dunst, and the UnifiedPush tests with app connectors and pywebpush in Python)"
	@echo "make soak     deps, debug build, then ten minutes of mixed load while services and agents are killed"
	@echo "make run      deps, release build, then every service on loopback (Ctrl-C stops them)"
	@echo "make bench    deps, release build, then throughput against raw libzmq and Mosquitto; writes $(BENCH_DIR)/results.json"
	@echo "              and $(BENCH_DIR)/chart.png (BENCH_DIR=DIR), and copies the chart to docs/bench-chart.png"
	@echo "make fuzz     deps, debug build, then $(FUZZ_FRAMES) generated and mutated inputs to every socket and to each parser (FUZZ_FRAMES=N)"
	@echo "make screenshots  deps, debug build, then the browser tests, saving the README's pictures of /console and /inbox in docs/screenshots"
	@echo "make clean    remove build products (the data folder stays)"

# Installs only what is missing; apt-get update runs first because a fresh machine's lists are empty.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@python3 -c "import pytest, requests, zmq, selenium, matplotlib, h2, http_ece, py_vapid, cryptography, jeepney, pywebpush" 2>/dev/null || python3 -m pip install -q $(PY_PACKAGES) 2>&1 | grep -v "Running pip as the 'root'" || true

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

# Each half runs beside a throwaway PostgreSQL server (Tests/Support/pgserver.py) named by NH_TEST_POSTGRES.
test: deps
	$(SWIFT) build --build-tests
	python3 Tests/Support/pgserver.py run --require -- $(SWIFT) test --skip-build
	NH_BIN_DIR="$(DEBUG_BIN)" python3 Tests/Support/pgserver.py run --require -- python3 -m pytest -q Tests/Gateway Tests/Hardening Tests/Desktop Tests/UnifiedPush

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

# The browser tests alone, keeping their screenshots as the README's pictures of the two pages.
screenshots: deps
	$(SWIFT) build
	NH_BIN_DIR="$(DEBUG_BIN)" NH_SCREENSHOT_DIR="$(CURDIR)/docs/screenshots" python3 -m pytest -q Tests/Gateway/test_web.py

clean:
	$(SWIFT) package clean
	rm -rf .build
