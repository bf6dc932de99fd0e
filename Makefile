# corral: the two commands a newcomer needs are `make run` and `make test`.
# Both install the Debian packages corral needs first (scripts/install-deps).

BUILD      ?= build
TEST_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
PYTHON     ?= /usr/bin/python3
SOURCES     = $(shell find src include tests bench -name '*.[ch]' 2>/dev/null)

.PHONY: all build test-build test kernel-test unit-test cli-test security-test run bench deps format format-check clean

all: build

deps:
	@scripts/install-deps

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The test build: AddressSanitizer + UndefinedBehaviorSanitizer.
test-build:
	@cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCORRAL_SANITIZE=ON >/dev/null
	@cmake --build $(TEST_BUILD) -j $(JOBS)

unit-test: test-build
	@cd $(TEST_BUILD) && ctest --output-on-failure

security-test: test-build
	@CORRAL=$(CURDIR)/$(TEST_BUILD)/corral $(PYTHON) -m pytest -q -p no:cacheprovider tests/security

kernel-test:
	@$(PYTHON) -m pytest -q -p no:cacheprovider tests/kernel

cli-test: test-build
	@CORRAL=$(CURDIR)/$(TEST_BUILD)/corral $(PYTHON) -m pytest -q -p no:cacheprovider tests/cli

test: deps format-check
	@$(MAKE) --no-print-directory kernel-test
	@$(MAKE) --no-print-directory unit-test
	@$(MAKE) --no-print-directory cli-test
	@$(MAKE) --no-print-directory security-test

run: deps build
	@$(BUILD)/corral doctor
	@echo
	@echo '--- corral run examples/demo.py ---'
	@$(BUILD)/corral run examples/demo.py

bench: deps build
	@$(PYTHON) bench/run.py --corral $(BUILD)/corral

format:
	@clang-format -i $(SOURCES)

format-check:
	@clang-format --dry-run --Werror $(SOURCES)

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
