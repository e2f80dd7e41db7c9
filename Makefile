# relayd: the two quickstart commands are `make demo` and `make test`.
# Both need root (network namespaces, iptables, NFQUEUE), as relayd itself does.

CARGO ?= cargo
DEBIAN_PACKAGES := iptables iproute2 iputils-ping procps curl tcpdump ethtool
# groff formats the man pages, zsh and fish run the completions (tests/dist.rs).
DEBIAN_PACKAGES += groff-base zsh fish
# prometheus scrapes relayd's /metrics in tests/metrics.rs, promtool (same package)
# checks dist/prometheus/relayd-alerts.yml, node_exporter reads `relayd status --format
# prometheus` with its textfile collector.
DEBIAN_PACKAGES += prometheus prometheus-node-exporter
# clang (BPF target) and libbpf-dev (bpf_helpers.h) build the XDP program (crates/xdp/build.rs).
DEBIAN_PACKAGES += clang libbpf-dev
# python3-scapy crafts the attacker's packets in the evasion suite (tests/evasion.rs); it is
# run as /usr/bin/python3, Debian's interpreter, which has the package.
DEBIAN_PACKAGES += python3-scapy
# strongSwan's charon is the IKEv2 peer of the interoperability tests (tests/ike.rs);
# libcharon-extra-plugins has kernel-libipsec (ESP in userspace: the tests' kernel may
# have no ESP module), libstrongswan-extra-plugins the curve25519 plugin.
DEBIAN_PACKAGES += strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-extra-plugins
# cargo-deb (crates.io) builds the Debian package (`make deb`, tests/package.rs).
CARGO_DEB_VERSION := 3.8.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build release deps test lint unit demo bench bench-passthrough bench-offload bench-sizing bench-esp experiment-compress experiment-split bench-proxy clean

all: build

build:
	$(CARGO) build --workspace --locked

release:
	$(CARGO) build --release --locked -p relayd -p relay-traffic

# Installs the Debian packages the tests and the demo drive, only if missing.
deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@$(SUDO) modprobe nfnetlink_queue 2>/dev/null || true
	@$(CARGO) deb --version >/dev/null 2>&1 || { echo "installing cargo-deb $(CARGO_DEB_VERSION) from crates.io (a few minutes)"; \
	  $(CARGO) install --locked --version $(CARGO_DEB_VERSION) cargo-deb; }

# rustfmt and clippy come with rustup's default profile; if a machine lacks them, say so
# loudly rather than fail the tests for a missing tool.
lint:
	@if $(CARGO) fmt --version >/dev/null 2>&1; then $(CARGO) fmt --all -- --check; \
	  else echo "WARNING: rustfmt not installed; formatting not checked"; fi
	@if $(CARGO) clippy --version >/dev/null 2>&1; then $(CARGO) clippy --workspace --all-targets --locked -- -D warnings; \
	  else echo "WARNING: clippy not installed; lints not checked"; fi

# Every test: unit tests, kernel tests on namespace testbeds, CLI tests. Needs root.
test: deps lint
	$(CARGO) test --workspace --locked
	CARGO="$(CARGO)" bash tests/unprivileged/run.sh
	SMOKE=1 $(CARGO) test --locked -p relayd --bench passthrough
	$(CARGO) test --locked -p relayd --test package -- --ignored
	$(MAKE) fuzz-smoke

# The Debian package: target/debian/relayd_VERSION-1_ARCH.deb with the binary, the systemd
# units, /etc/relayd/relayd.toml (a conffile), man pages and completions (metadata in
# daemon/relayd/Cargo.toml). Release build first (fat LTO: minutes), then cargo-deb packs it
# without building again; tests/package.rs builds it the same way.
.PHONY: deb dist
deb: deps
	$(CARGO) build --release --locked -p relayd
	$(CARGO) deb --locked -p relayd --no-build --strip

# Regenerates the man pages (dist/man) and completions (dist/completions) from the CLI's
# clap definitions; `make test` fails while the committed ones differ.
dist:
	RELAYD_UPDATE_DIST=1 $(CARGO) test --locked -p relayd --test dist

demo: deps release
	$(SUDO) bash examples/demo/demo.sh

# Criterion benches (per-packet cost of parsing, chains, services).
bench:
	$(CARGO) bench --workspace --locked --bench chain --bench compress

# Per core, relayd against kernel forwarding in the same run (docs/performance.md): relay
# work on CPU 1, generator and sinks on CPU 0; CPU per packet, RFC 2544 rates, overload
# curve (docs/overload.dat, .png), latency percentiles, TCP. About 15 minutes on a quiet
# machine. ROUNDS, SECS, TRIALS; SMOKE=1 is the short run `make test` does.
bench-passthrough: deps
	@command -v gnuplot >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq gnuplot-nox; }
	$(SURICATA_DEP)
	$(CARGO) bench -p relayd --locked --bench passthrough

# Suricata 7 (bookworm-backports), the peer of the flow offload comparisons; for the bench only.
SURICATA_DEP = @command -v suricata >/dev/null || { echo 'deb http://deb.debian.org/debian bookworm-backports main' | $(SUDO) tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null && $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq -t bookworm-backports suricata; }

# Only the flow offload comparisons of bench-passthrough (one TCP flow and a mixed workload
# through `ids` with and without offload and through Suricata, docs/performance.md).
bench-offload: deps
	$(SURICATA_DEP)
	OFFLOAD=1 $(CARGO) bench -p relayd --locked --bench passthrough

# Packets/s per core for `accept` and each service at 64 and 1,500 bytes, measured as
# bench-passthrough measures (the sizing table in docs/operations.md). About 20 minutes.
bench-sizing: deps
	SIZING=1 ROUNDS=$${ROUNDS:-1} $(CARGO) bench -p relayd --locked --bench passthrough

# ESP per cipher beside `openssl speed` in the same run (docs/performance.md).
bench-esp:
	bash benches/esp-vs-openssl.sh

# Seed 003's experiment (Fig. 11/12) on a namespace testbed: tables and plots into docs/.
experiment-compress: deps
	@command -v gnuplot >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq gnuplot-nox; }
	$(CARGO) bench -p relayd --locked --bench experiment_compress

# MOSTO's Fig. 5 (seed 004): download times direct, split at one and at two relays,
# 40 ms RTT per segment from the delay service; table, data and plot into docs/.
experiment-split: deps
	@command -v gnuplot >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq gnuplot-nox; }
	$(CARGO) bench -p relayd --locked --bench experiment_split

# The split proxy's throughput on one long flow against kernel forwarding, same testbed
# and run, optimised build (docs/performance.md).
bench-proxy: deps
	$(CARGO) test --profile bench -p relay-proxy --locked --test throughput -- --nocapture

# The fault suite's long versions (docs/reliability.md): 1,000 kill -9 cycles, 300 reloads
# under a 20,000 packets/s flow, 30 s floods; about 15 minutes. `make test` runs the short ones.
# Then the evasion suite's (tests/evasion.rs): the fragment timeout with Linux's default 30 s,
# the TCP fragment cases' timeout, more random orders, 2,000 connections per memory attack.
# Then IKE (tests/ike.rs), relayd optimised (a debug relayd cannot encrypt 20,000 packets/s
# on this machine: its queues overflow): 60 s at 20,000 packets/s through IKE-keyed ESP,
# child SA rekeyed every 10 s, relay to relay and relay to strongSwan; no loss, no duplicate.
.PHONY: soak
soak: deps
	RELAYD_FAULT_CYCLES=1000 RELAYD_FAULT_RELOADS=300 RELAYD_FAULT_SECS=30 \
	  $(CARGO) test -p relayd --locked --test faults -- --nocapture
	RELAYD_EVASION_SOAK=1 $(CARGO) test -p relayd --locked --test evasion -- --nocapture
	RELAYD_IKE_SOAK=1 $(CARGO) test --release -p relayd --locked --test ike -- --nocapture \
	  relayd_pair_carries_traffic_across_child_rekeys charon_and_relayd_carry_traffic

# Fuzzing (fuzz/, docs/reliability.md): every cargo-fuzz target, one at a time, for
# FUZZ_SECONDS each, from the committed seeds; installs cargo-fuzz if missing and needs
# the nightly toolchain. A crash fails it and prints the input's path under fuzz/artifacts/.
# `fuzz-smoke` (in `make test`) runs each for FUZZ_SMOKE_SECONDS (30) and only warns if
# nightly is missing.
# `fuzz-corpus` regenerates the committed seeds in fuzz/seeds/.
FUZZ_SECONDS ?= 300
FUZZ_SMOKE_SECONDS ?= 30
.PHONY: fuzz fuzz-smoke fuzz-corpus
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash fuzz/run.sh
fuzz-smoke:
	FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) bash fuzz/run.sh --smoke
fuzz-corpus:
	cargo +nightly run --release --manifest-path fuzz/Cargo.toml --example build_corpus

clean:
	$(CARGO) clean
