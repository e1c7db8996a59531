# rig-conform: `make certify` and `make test` do all set-up themselves on a
# fresh Debian 12 machine (tools/setup.sh: Debian packages, and an OCaml >= 5.1,
# built once into ~/.cache/rig-conform when none is on PATH).

SHELL := /bin/bash
.DEFAULT_GOAL := certify

# The OCaml to use; computed once per make run, after set-up.
OCAML_BIN := $(shell ./tools/setup.sh | tail -n 1)
ifeq ($(OCAML_BIN),)
$(error tools/setup.sh failed: see its messages above)
endif
export PATH := $(OCAML_BIN):$(PATH)
export OCAMLPATH := $(abspath $(OCAML_BIN)/../lib/ocaml)

RIG_CONFORM := ./_build/default/harness/certify/main.exe
PYTEST := /usr/bin/python3 -m pytest
J ?= $(shell nproc)
PREFIX ?= /usr/local

.PHONY: build certify certify-hostmem selftest test unit pytest bench mutate blind-seeds install clean

build:
	dune build 2>&1
	@test -x $(RIG_CONFORM)

## certify: every clause of spec/clauses.tsv against the bundled fake driver
certify: build
	$(RIG_CONFORM) certify --driver fake -j $(J)

## certify-hostmem: the second bundled driver, certified as a plugin, as a driver author would
HOSTMEM_PLUGIN := _build/default/drivers/hostmem/hostmem.cmxs
certify-hostmem: build
	$(RIG_CONFORM) certify --plugin $(HOSTMEM_PLUGIN) --driver hostmem -j $(J) --report out/certify/hostmem.json

## selftest: every mutant caught with exactly its clause; conforming pair clean over 20 seeds
# Its runs mostly wait (hangs the mutants make, holds): twice the cores' worth
# at once (on 2 cores: 216 s at -j 2, 124 s at -j 4, 28+9 s of CPU).
SELFTEST_J ?= $(shell echo $$((2 * $(J))))
selftest: build
	$(RIG_CONFORM) selftest --seeds 20 -j $(SELFTEST_J)

# The suite mostly waits (children, the document's bounds): its tests run on
# PYTEST_WORKERS processes at once (pytest-xdist; on 2 cores 8 took 627 s
# where 4 took 854 s, the cores 60% busy); PYTEST_WORKERS=0 runs them in
# this one. --durations: the slowest tests, for the suite's time (issue 14).
PYTEST_WORKERS ?= 8
pytest: build
	$(PYTEST) -q -n $(PYTEST_WORKERS) --durations=25 tests

## unit: the components' own tests (dune test: the fake driver's smoke test)
unit: build
	dune test --force 2>&1

## test: the whole suite
test: unit selftest pytest

## bench: validation layer cost ratio and certify wall time, then the fuzzers' exec/s (not a test)
bench: build
	$(RIG_CONFORM) bench
	$(MAKE) -s fuzz-bench
	$(MAKE) -s san-bench

## blind-seeds: every conforming blind driver certified over seeds 1..BLIND_SEEDS (default 20): no
## clause may fail (hours on two cores; not part of test; PYTEST_ARGS='-k NAME' selects drivers)
BLIND_SEEDS ?= 20
blind-seeds: build
	RIG_CONFORM_BLIND_SEEDS=$(BLIND_SEEDS) $(PYTEST) -q -n 2 tests/test_blind_seeds.py $(PYTEST_ARGS)

## mutate: source-level mutants of hostmem, the fake and the reference rig (mutate/mutants.tsv), each
## certified once; the score per target in out/mutate/report.md (docs/mutate.md; not part of test)
mutate: build
	./tools/mutate.sh

## install: rig-conform and rig-cert, the OCaml libraries (rig_conform.*), rig_edge.h with its
## pkg-config file, and the bundled scenarios, under PREFIX (docs/writing-a-driver.md)
install: build
	dune install --prefix $(PREFIX) 2>&1
	install -d $(PREFIX)/include $(PREFIX)/lib/pkgconfig $(PREFIX)/share/rig-conform/scenarios
	install -m 644 include/rig_edge.h $(PREFIX)/include/rig_edge.h
	install -m 644 scenarios/*.scn $(PREFIX)/share/rig-conform/scenarios/
	sed 's|@PREFIX@|$(PREFIX)|' tools/rig_edge.pc.in > $(PREFIX)/lib/pkgconfig/rig_edge.pc

clean:
	dune clean
	rm -rf out
-include mk/*.mk
