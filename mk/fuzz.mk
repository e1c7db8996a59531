# mk/fuzz.mk: the libFuzzer targets (fuzz/, issue 6).
#   make fuzz        build; each target over its corpus and regressions; then
#                    FUZZ_TIME (60) seconds of fuzzing each, one process
#   make fuzz-smoke  the same with FUZZ_SMOKE_TIME (10) seconds (the test suite's)
#   make fuzz-build  only the build (fuzz/build.sh, OSS-Fuzz conventions)
# New inputs go to out/fuzz/corpus/<target> (the committed seeds stay as they
# are); crashes to out/fuzz/artifacts/.  Turn one into a readable schedule
# with: RIG_FUZZ_TRACE=1 out/fuzz/room_grow_fuzz <input>
.PHONY: fuzz fuzz-smoke fuzz-build fuzz-regress

FUZZ_OUT := out/fuzz
FUZZ_TIME ?= 60
FUZZ_SMOKE_TIME ?= 10
FUZZ_SRCS := $(wildcard fuzz/*.c fuzz/*.h fuzz/build*.sh) drivers/fake/fake_core.c drivers/fake/fake_core.h include/rig_edge.h

$(FUZZ_OUT)/room_grow_fuzz: $(FUZZ_SRCS)
	OUT=$(abspath $(FUZZ_OUT)) ./fuzz/build.sh

fuzz-build: $(FUZZ_OUT)/room_grow_fuzz

# Each built target <t>_fuzz over fuzz/corpus/<t> and fuzz/regressions/<t>:
# -runs=0 runs every input once and stops at the first crash or violation.
fuzz-regress: fuzz-build
	@set -e; for b in $(FUZZ_OUT)/*_fuzz; do t=$$(basename $$b _fuzz); \
	  echo "== $$t: corpus and regressions"; \
	  $$b -runs=0 fuzz/corpus/$$t $$(test -d fuzz/regressions/$$t && echo fuzz/regressions/$$t) 2>&1 \
	    | grep -E '^#[0-9]+.*(INITED|DONE)|VIOLATION|ERROR|Executed' ; \
	  test $${PIPESTATUS[0]} -eq 0; done

define fuzz_run
	@set -e; mkdir -p $(FUZZ_OUT)/artifacts; for b in $(FUZZ_OUT)/*_fuzz; do t=$$(basename $$b _fuzz); \
	  mkdir -p $(FUZZ_OUT)/corpus/$$t; echo "== $$t: $(1) s"; \
	  $$b -max_total_time=$(1) -timeout=10 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_OUT)/artifacts/$$t- $(FUZZ_OUT)/corpus/$$t fuzz/corpus/$$t 2>&1 \
	    | grep -E '^#[0-9]+.*DONE|VIOLATION|ERROR|SUMMARY|Test unit written|exec_per_sec|number_of_executed' ; \
	  test $${PIPESTATUS[0]} -eq 0; done
endef

fuzz: fuzz-regress
	$(call fuzz_run,$(FUZZ_TIME))

fuzz-smoke: fuzz-regress
	$(call fuzz_run,$(FUZZ_SMOKE_TIME))

# A fuzz input as a scenario replaying its schedule in the certifier
# (fuzz/to_scenario.sh; docs/scenario-language.md, statement schedule):
#   make fuzz-to-scenario INPUT=path [MUTANT=name] [OUT=dir/file.scn]
.PHONY: fuzz-to-scenario
fuzz-to-scenario:
	@test -n "$(INPUT)" || { echo "usage: make fuzz-to-scenario INPUT=path [MUTANT=name] [OUT=dir/file.scn]" >&2; exit 2; }
	@./fuzz/to_scenario.sh "$(INPUT)" "$(MUTANT)" $(if $(OUT),"$(OUT)")

# The fuzzers' speed, for make bench: FUZZ_BENCH_RUNS (20000) executions of
# each target from its corpus (new inputs go to a temporary directory, not to
# the corpus); exec/s is libFuzzer's stat::number_of_executed_units
# (-print_final_stats) over the run's wall time (its own average_exec_per_sec
# divides by whole seconds: 0 under one second).
.PHONY: fuzz-bench
FUZZ_BENCH_RUNS ?= 20000
fuzz-bench: fuzz-build
	@set -e; for b in $(FUZZ_OUT)/*_fuzz; do t=$$(basename $$b _fuzz); \
	  w=$$(mktemp -d); t0=$$(date +%s.%N); \
	  $$b -seed=1 -runs=$(FUZZ_BENCH_RUNS) -timeout=10 -print_final_stats=1 -artifact_prefix=$$w/ \
	    $$w fuzz/corpus/$$t > $$w/log 2>&1 || { tail -20 $$w/log; rm -rf $$w; echo "fuzz-bench: $$t failed" >&2; exit 1; }; \
	  t1=$$(date +%s.%N); \
	  awk -v t=$$t -v s=$$t0 -v e=$$t1 '/^stat::number_of_executed_units:/ {n=$$2} \
	    END {if (n == "") {print "fuzz-bench: " t ": no final stats" > "/dev/stderr"; exit 1}; \
	         printf "fuzz %-10s %8d execs in %6.2f s  %8.0f exec/s\n", t, n, e - s, n / (e - s)}' $$w/log \
	    || { rm -rf $$w; exit 1; }; \
	  rm -rf $$w; done
