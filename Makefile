SHELL := /bin/bash
# corral: the two commands a newcomer needs are `make run` and `make test`.
# Both install the Debian packages corral needs first (scripts/install-deps).

BUILD      ?= build
TEST_BUILD ?= build-asan
# What a suite's target builds before it runs: each builds its build, and
# `make test`, which builds each once, clears these for its suites (a build
# with nothing to do still costs make's checks of every target, 10 to 20 s
# on a busy 2-core machine).
BUILT      ?= build
TEST_BUILT ?= test-build
JOBS       ?= $(shell nproc)
PYTHON     ?= /usr/bin/python3
SOURCES     = $(shell find src include tests bench -name '*.[ch]' 2>/dev/null)

.PHONY: stress-test all build test-build test docs-check layers-check style-check deploy-check fuzz kernel-test unit-test cli-test security-test integration-test run gateway-demo bench deps test-deps format format-check clean

all: build

deps:
	@scripts/install-deps

# The tests also need every kernel's runtime (Node.js, R).
test-deps:
	@scripts/install-deps --tests

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The test build: AddressSanitizer + UndefinedBehaviorSanitizer.
test-build:
	@cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCORRAL_SANITIZE=ON >/dev/null
	@cmake --build $(TEST_BUILD) -j $(JOBS)

unit-test: $(TEST_BUILT)
	@cd $(TEST_BUILD) && ctest --output-on-failure

# The security suite twice: sandboxes made afresh, then forked from a zygote.
security-test: $(TEST_BUILT)
	@CORRAL=$(CURDIR)/$(TEST_BUILD)/corral $(PYTHON) -m pytest -q -p no:cacheprovider tests/security
	@echo "security suite, every sandbox forked from a zygote:"
	@CORRAL=$(CURDIR)/$(TEST_BUILD)/corral CORRAL_TEST_TEMPLATE=bare \
		CORRAL_TEST_CONFIG=$(CURDIR)/tests/security/corral.yaml \
		$(PYTHON) -m pytest -q -p no:cacheprovider tests/security

FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 20
FUZZ_DNS_SECONDS ?= 10
FUZZ_SNIFF_SECONDS ?= 10
FUZZ_SOURCES = tests/fuzz/fuzz_frames.c src/kernel/ctl.c src/kernel/frame.c src/base/error.c \
	src/base/utf8.c

# The frame and control-message decoders, the DNS messages of the egress
# resolver stub and the egress proxy's look at a connection's first bytes
# (TLS SNI, HTTP Host), under libFuzzer (clang), for a short run each.
fuzz:
	@mkdir -p $(FUZZ_BUILD)/corpus
	@clang -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $(FUZZ_SOURCES) -ljansson -o $(FUZZ_BUILD)/fuzz_frames
	@cp tests/fuzz/corpus/* $(FUZZ_BUILD)/corpus/
	@$(FUZZ_BUILD)/fuzz_frames -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
		-print_final_stats=1 $(FUZZ_BUILD)/corpus 2>&1 | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done' ; \
		test $${PIPESTATUS[0]} -eq 0
	@mkdir -p $(FUZZ_BUILD)/dns-corpus
	@clang -g -O1 -D_GNU_SOURCE -Isrc -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined tests/fuzz/fuzz_dns.c src/egress/dns.c -o $(FUZZ_BUILD)/fuzz_dns
	@cp tests/fuzz/dns-corpus/* $(FUZZ_BUILD)/dns-corpus/
	@$(FUZZ_BUILD)/fuzz_dns -max_total_time=$(FUZZ_DNS_SECONDS) -max_len=4096 \
		-print_final_stats=1 $(FUZZ_BUILD)/dns-corpus 2>&1 | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done' ; \
		test $${PIPESTATUS[0]} -eq 0
	@mkdir -p $(FUZZ_BUILD)/sniff-corpus
	@clang -g -O1 -D_GNU_SOURCE -Isrc -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined tests/fuzz/fuzz_sniff.c src/egress/sniff.c -o $(FUZZ_BUILD)/fuzz_sniff
	@cp tests/fuzz/sniff-corpus/* $(FUZZ_BUILD)/sniff-corpus/
	@$(FUZZ_BUILD)/fuzz_sniff -max_total_time=$(FUZZ_SNIFF_SECONDS) -max_len=70000 \
		-print_final_stats=1 $(FUZZ_BUILD)/sniff-corpus 2>&1 | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done' ; \
		test $${PIPESTATUS[0]} -eq 0

kernel-test:
	@$(PYTHON) -m pytest -q -p no:cacheprovider tests/kernel

cli-test: $(TEST_BUILT)
	@CORRAL=$(CURDIR)/$(TEST_BUILD)/corral $(PYTHON) -m pytest -q -p no:cacheprovider tests/cli

# `corral serve` driven by the official npm SDKs (tests/integration); then the
# gateway's suites (OpenAI's and Anthropic's APIs) again with their code run
# by the remote providers, e2b and
# opensandbox, pointed at a second `corral serve` (without the files whose
# tests do not depend on where the code runs: the scripted upstream itself,
# an upstream's stream breaking off, keys' limits, background runs, the
# Files API in Anthropic's shape).
GATEWAY_LOCAL_ONLY = $(addprefix tests/integration/,gateway-mock.test.mjs gateway-endings.test.mjs \
	gateway-tenants.test.mjs gateway-background.test.mjs gateway-anthropic-files.test.mjs)
GATEWAY_SUITE = $(filter-out $(GATEWAY_LOCAL_ONLY),$(wildcard tests/integration/gateway*.test.mjs)) \
	tests/integration/messages.test.mjs
integration-test: $(TEST_BUILT)
	@scripts/install-node-deps tests/integration
	@CORRAL=$(CURDIR)/$(TEST_BUILD)/corral node --test --test-concurrency=1 tests/integration/
	@for provider in e2b opensandbox; do \
		echo "the gateway suite, sandbox provider $$provider:"; \
		CORRAL=$(CURDIR)/$(TEST_BUILD)/corral CORRAL_GW_PROVIDER=$$provider \
			node --test --test-concurrency=1 $(GATEWAY_SUITE) || exit 1; \
	done

# The documentation's links, anchors and repository paths (README.md, docs/,
# tests/README.md): no build, root or network needed.
docs-check:
	@scripts/check-docs

# The source folders' layers (docs/architecture.md): every #include goes to a
# folder below, and no folders include each other in a circle.
layers-check:
	@scripts/check-layers

# The rules of docs/architecture.md ("Errors and cleanup") that clang-format
# cannot see: each file opens with what it is for, no goto, no function over
# 120 lines.
style-check:
	@scripts/check-style

# deploy/: the Kubernetes manifests against the API's schemas and against
# each other, the container image's definition against the repository and
# Debian's packages, and `corral serve --check` of the release build on the
# manifests' configuration (tests/deploy, docs/kubernetes.md). No cluster
# or container engine needed; seconds.
deploy-check: $(BUILT)
	@scripts/install-node-deps tests/deploy
	@CORRAL=$(CURDIR)/$(BUILD)/corral node --test tests/deploy/

# The release build first: -O2 sees warnings (-Werror) that the test build's
# -O0 does not.
test: docs-check layers-check style-check test-deps format-check
	@$(MAKE) --no-print-directory build
	@$(MAKE) --no-print-directory deploy-check BUILT=
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory kernel-test
	@$(MAKE) --no-print-directory test-build
	@$(MAKE) --no-print-directory unit-test TEST_BUILT=
	@$(MAKE) --no-print-directory cli-test TEST_BUILT=
	@$(MAKE) --no-print-directory security-test TEST_BUILT=
	@$(MAKE) --no-print-directory integration-test TEST_BUILT=

# The whole suite again while CPU-bound processes (CORRAL_STRESS_HOGS, 2 by
# default) compete for the cores, as on a busy CI machine.
stress-test:
	@scripts/stress-test

run: deps build
	@$(BUILD)/corral doctor
	@echo
	@echo '--- corral run --out $(BUILD)/demo examples/demo.py ---'
	@$(BUILD)/corral run --out $(BUILD)/demo examples/demo.py

# The gateway's seed example with the official openai SDK against a scripted model.
gateway-demo: deps build
	@scripts/install-node-deps tests/integration
	@node examples/gateway-demo.mjs $(BUILD)/corral

bench: deps build
	@scripts/install-bench-deps
	@scripts/install-node-deps tests/integration
	@$(PYTHON) bench/run.py --corral $(BUILD)/corral

format:
	@clang-format -i $(SOURCES)

format-check:
	@clang-format --dry-run --Werror $(SOURCES)

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(FUZZ_BUILD)
