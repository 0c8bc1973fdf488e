# pushizo-worker. The two commands the README gives: `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := build

.PHONY: deps build release test demo bench clean

deps:
	@scripts/install-deps.sh

build: deps
	swift build

release: deps
	swift build -c release

# Builds, starts a throwaway PostgreSQL, runs every test against it, stops it.
test: deps
	scripts/run-tests.sh

# The daemon's main job on embedded defaults: throwaway PostgreSQL + the built-in provider emulator over TLS.
demo: deps
	scripts/demo.sh

clean:
	rm -rf .build var

# The performance targets (README, Measuring) as ratios against h2load and pgbench, measured in one run.
bench: deps
	scripts/bench.sh
