# sandcell — see README.md. `make help` lists the targets.

GO        ?= go
BIN       := bin/sandcell
BENCH_BIN := bin/sandcell-bench
# cgo + seccomp: without the tag the build succeeds but every run fails.
# netgo/osusergo + -static: one self-contained binary (also for the VM lane).
TAGS      := seccomp netgo osusergo
# The release (VERSION) and the commit are stamped into the binary:
# `sandcell --version` and MCP serverInfo.version show them.
VERSION   := $(shell cat VERSION)
COMMIT    := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
VPKG      := github.com/sandcell/sandcell/internal/version
LDFLAGS   := -s -w -extldflags=-static -X $(VPKG).release=$(VERSION) -X $(VPKG).commit=$(COMMIT)
# sandcell home: the layer store lives in $(LAYER_DIR)/rootfs (rootfs.DefaultDir).
LAYER_DIR ?= /var/lib/sandcell
# Debian packages the build, the layers and the tests need (slurm*, munge:
# the Slurm recipe's test starts a single-node cluster of its own; lintian:
# the Debian package's test; python3-httpx: the official Judge0 Python SDK's
# HTTP client, conformance/judge0_sdk_test.go; nginx: the stock proxy in front
# of two E2B instances, e2b's TestTwoNodesBehindNginx, which runs its own).
APT_PKGS  := gcc libc6-dev libseccomp-dev mmdebstrap busybox-static runc runsc bubblewrap \
	slurmctld slurmd slurm-client munge lintian python3-httpx nginx
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export CGO_ENABLED := 1
export PATH := $(PATH):/usr/local/go/bin

# go vet, every package, every check.
VET = $(GO) vet -tags '$(TAGS)' ./...

.PHONY: help deps build layers run test root-test unit bench lint golden clean rootless-user install deb hermetic

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-z0-9-]+:.*## /{printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## install the Debian packages that are missing (apt-get)
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

build: ## build ./bin/sandcell and the benchmark harness ./bin/sandcell-bench (cgo, -tags seccomp, static)
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sandcell
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BENCH_BIN) ./cmd/sandcell-bench

# SANDCELL_BUILD_ALL=1 (CI) builds every language of the catalogue.
layers: build ## build the default language layers (sh, python; all with SANDCELL_BUILD_ALL=1) if missing
	$(SUDO) ./$(BIN) --home $(LAYER_DIR) rootfs build $(if $(filter 1,$(SANDCELL_BUILD_ALL)),--all,sh python)

run: deps build layers ## set up everything, then run a demo program in a sandbox
	$(SUDO) ./$(BIN) doctor || true
	@echo '--- demo: python in a fresh sandbox (--json) ---'
	$(SUDO) ./$(BIN) --home $(LAYER_DIR) run --lang python --json \
		--code 'import os, platform; print("hello from", platform.python_version(), "as uid", os.getuid())'

# The rootless suite (conformance/rootless_test.go) runs sandcell as this
# unprivileged user.
ROOTLESS_USER ?= sandcell-rootless
rootless-user: ## create the unprivileged user the rootless tests run sandcell as
	@id $(ROOTLESS_USER) >/dev/null 2>&1 || $(SUDO) useradd --system --create-home --shell /usr/sbin/nologin $(ROOTLESS_USER)

test: deps build layers conformance-deps rootless-user ## every test; root tests run when root (CI is root)
	$(VET)
	cd conformance && $(GO) vet ./...
	cd deploy/k8s/validate && $(GO) vet ./...
	# -p 1: packages one at a time; the teardown checks look host-wide
	# (processes in the sandbox uid range, cgroups, mounts), so another
	# package's sandboxes running at the same time would look like leftovers.
	SANDCELL_LAYER_DIR=$(LAYER_DIR) SANDCELL_TEST_STORE=$(LAYER_DIR) $(GO) test -p 1 -tags '$(TAGS)' -count=1 -timeout 60m ./...
	$(MAKE) --no-print-directory hermetic
	$(FUZZ)
	$(CONFORMANCE)
	$(K8S_VALIDATE)

# The centre's logic is tested without privilege (issue #36): executor's and
# service's tests, built here and run as an unprivileged user (uid 65534 when
# root) from a copy of the package directory, with no layer store and no
# cgroup; each must pass and cover at least HERMETIC_MIN% of its statements.
HERMETIC_PKGS := executor service
HERMETIC_MIN  := 70
hermetic: ## executor and service tests as an unprivileged user, no layers: pass, and cover >= 70% of statements
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; chmod 755 "$$d"; \
	as=""; [ "$$(id -u)" = 0 ] && as="setpriv --reuid=65534 --regid=65534 --clear-groups"; \
	for p in $(HERMETIC_PKGS); do \
		$(GO) test -c -cover -tags '$(TAGS)' -o "$$d/$$p.test" ./$$p || exit 1; \
		mkdir "$$d/$$p" && cp -r $$p/. "$$d/$$p/" && chmod -R a+rX "$$d"; \
		out=$$(cd "$$d/$$p" && $$as env -i PATH=/usr/bin:/bin HOME="$$d" TMPDIR=/tmp "$$d/$$p.test" -test.count=1 2>&1); rc=$$?; \
		echo "$$out" | tail -3; [ $$rc = 0 ] || exit $$rc; \
		cov=$$(echo "$$out" | sed -n 's/^coverage: \([0-9.]*\)% of statements.*/\1/p' | tail -1); \
		awk -v c="$$cov" -v m=$(HERMETIC_MIN) -v p=$$p 'BEGIN { if (c == "" || c + 0 < m) { printf "hermetic: %s covers %s%% of its statements, below %s%%\n", p, c, m; exit 1 } printf "hermetic: %s covers %s%% of its statements, unprivileged\n", p, c }' || exit 1; \
	done

unit: ## fast tests only (-short: no layer builds, no containers)
	$(GO) test -tags '$(TAGS)' -short ./...

# BENCH_FLAGS adds flags, e.g. BENCH_FLAGS='--lang all' or '-n 100'
# (sandcell-bench -h lists them).
BENCH_FLAGS ?=
bench: deps build layers ## latency (bare, bwrap, runc/runsc CLIs, sandcell) and throughput side by side: BENCHMARKS.md block, docs/bench-latency.svg
	$(SUDO) ./$(BENCH_BIN) --home $(LAYER_DIR) --markdown BENCHMARKS.md --plot docs/bench-latency.svg $(BENCH_FLAGS)
	$(SUDO) ./$(BENCH_BIN) --home $(LAYER_DIR) kernel --markdown BENCHMARKS.md

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(VET)

golden: ## refresh golden files (review the diff!)
	$(GO) test -tags '$(TAGS)' ./oci ./seccomp -run Golden -update

clean: ## remove build outputs (not the layer store)
	rm -rf bin build

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary, its man page and
# shell completions (generated from the command table), the systemd unit,
# tmpfiles entry, AppArmor profile and an example config. The unit runs
# $(PREFIX)/bin/sandcell.
PREFIX  ?= /usr/local
DESTDIR ?=
UNITDIR  = $(if $(filter /usr,$(PREFIX)),/lib,$(PREFIX)/lib)/systemd/system
install: build ## install into $(DESTDIR)$(PREFIX) (PREFIX=/usr/local): binary, man page, completions, systemd unit, tmpfiles, AppArmor profile, config
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/sandcell
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) ./$(BIN) man | gzip -9n > $(DESTDIR)$(PREFIX)/share/man/man1/sandcell.1.gz
	./$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/sandcell
	./$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_sandcell
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/lib/tmpfiles.d $(DESTDIR)/etc/apparmor.d $(DESTDIR)/etc/sandcell
	sed 's|/usr/bin/sandcell|$(PREFIX)/bin/sandcell|g' packaging/sandcell.service > $(DESTDIR)$(UNITDIR)/sandcell.service
	install -m 0644 packaging/sandcell.tmpfiles $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/sandcell.conf
	install -m 0644 packaging/apparmor.sandcell $(DESTDIR)/etc/apparmor.d/sandcell
	install -m 0644 packaging/sandcell.toml $(DESTDIR)/etc/sandcell/sandcell.toml

# make deb: build/sandcell_$(VERSION)_amd64.deb from `make install
# PREFIX=/usr` into a staging root, with dpkg-deb (no debhelper needed).
DEB_ROOT := build/deb
DEB      := build/sandcell_$(VERSION)_amd64.deb
deb: build ## build the Debian package build/sandcell_VERSION_amd64.deb (dpkg-deb; lintian checks it in the tests)
	rm -rf $(DEB_ROOT) && mkdir -p $(DEB_ROOT)/DEBIAN
	$(MAKE) --no-print-directory install PREFIX=/usr DESTDIR=$(CURDIR)/$(DEB_ROOT)
	install -D -m 0644 packaging/debian/copyright $(DEB_ROOT)/usr/share/doc/sandcell/copyright
	printf 'sandcell (%s) unstable; urgency=medium\n\n  * Release %s (commit %s).\n\n -- sandcell developers <sandcell@example.org>  %s\n' \
		'$(VERSION)' '$(VERSION)' '$(COMMIT)' "$$(date -R -d @$$(git log -1 --format=%ct 2>/dev/null || date +%s))" \
		| gzip -9n > $(DEB_ROOT)/usr/share/doc/sandcell/changelog.gz
	install -D -m 0644 packaging/debian/lintian-overrides $(DEB_ROOT)/usr/share/lintian/overrides/sandcell
	sed 's/@VERSION@/$(VERSION)/' packaging/debian/control > $(DEB_ROOT)/DEBIAN/control
	echo "Installed-Size: $$(du -sk --exclude=DEBIAN $(DEB_ROOT) | cut -f1)" >> $(DEB_ROOT)/DEBIAN/control
	printf '/etc/sandcell/sandcell.toml\n/etc/apparmor.d/sandcell\n' > $(DEB_ROOT)/DEBIAN/conffiles
	install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm $(DEB_ROOT)/DEBIAN/
	cd $(DEB_ROOT) && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum > DEBIAN/md5sums
	dpkg-deb --root-owner-group -Zxz --build $(DEB_ROOT) $(DEB)

.PHONY: test-cgroupv2
test-cgroupv2: deps build layers ## cgroup v2 lane: the cgroup tests in a qemu VM on Debian's 6.1 kernel (testdata/vm)
	$(SUDO) env PATH="$(PATH)" GO="$(GO)" SANDCELL_LAYER_DIR="$(LAYER_DIR)" ./testdata/vm/run.sh

.PHONY: conformance-deps test-mcp
# npm install, not npm ci: vite (under the Inspector) names an optional
# Windows-only package that the registry here does not serve, so the lock
# cannot list it and npm ci refuses; npm install takes the locked versions.
conformance-deps: ## install the real MCP clients, the E2B SDKs and Node 22 in conformance/ (versions in package-lock.json)
	cd conformance && npm install --no-audit --no-fund
	cd conformance/e2b && npm ci --no-audit --no-fund

# A short run of each fuzz target (package:Target; go test -fuzz takes one
# target at a time; the seed corpora in testdata/fuzz also run in every
# `go test`), and the real clients (Go and TypeScript SDKs, Inspector,
# conformance suite) in the nested module; both part of `test`.
FUZZ_MCP     := ./mcp:FuzzDispatch ./mcp:FuzzDecode ./mcp:FuzzToolArguments
FUZZ_TARGETS  = $(FUZZ_MCP) ./internal/workspace:FuzzResolve ./oci:FuzzTextCleaner
FUZZ_TIME    ?= 15s
FUZZ = for t in $(FUZZ_TARGETS); do set -- $$(echo $$t | tr : ' '); \
	$(GO) test -tags '$(TAGS)' -run '^$$' -fuzz "^$$2\$$" -fuzztime $(FUZZ_TIME) $$1 || exit 1; done
CONFORMANCE = cd conformance && SANDCELL_LAYER_DIR=$(LAYER_DIR) $(GO) test -count=1 -timeout 20m ./...
# The Kubernetes manifests against the API's types (a module of its own:
# the Kubernetes libraries stay out of sandcell's build).
K8S_VALIDATE = cd deploy/k8s/validate && $(GO) test -count=1 ./...

test-mcp: FUZZ_TARGETS = $(FUZZ_MCP)
test-mcp: deps build layers conformance-deps ## only the MCP layer: protocol tests, fuzz, real clients
	$(GO) test -count=1 ./mcp
	$(FUZZ)
	$(CONFORMANCE)

# A current gVisor runsc (systrap platform), built from the Go module proxy.
# It must be static (CGO_ENABLED=0 on the recipe line overrides the export
# above): a cgo build cannot exec its umounter after pivot_root into an empty
# root (testdata/runsc/README.md). Not preferred yet: use it with
# `sandcell --runsc $(RUNSC_DIR)/runsc`; LINK=1 also installs it as
# /usr/local/bin/runsc, which then shadows Debian's.
RUNSC_VERSION := v0.0.0-20260905035102-160fafc42237
RUNSC_DIR     := /var/lib/sandcell/runsc
.PHONY: runsc
runsc: ## build a current, static gVisor runsc (systrap) into /var/lib/sandcell/runsc
	mkdir -p $(RUNSC_DIR)
	CGO_ENABLED=0 GOBIN=$(RUNSC_DIR) $(GO) install -trimpath \
		-ldflags '-s -w -X gvisor.dev/gvisor/runsc/version.version=$(RUNSC_VERSION)' \
		gvisor.dev/gvisor/runsc@$(RUNSC_VERSION)
	$(RUNSC_DIR)/runsc --version | grep -q '$(RUNSC_VERSION)'
	if [ "$(LINK)" = 1 ]; then install -m 0755 $(RUNSC_DIR)/runsc /usr/local/bin/runsc; fi
