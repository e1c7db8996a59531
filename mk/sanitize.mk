# mk/sanitize.mk: the sanitizer runs (issue 6).
#   make asan  AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer):
#              1. the room/grow fuzz target over its corpus and regressions,
#                 deterministic worker (the libFuzzer build is ASan+UBSan);
#              2. the same inputs with the fake's real worker thread;
#              3. proof: the stop-frees-regions mutant IS reported (use after free);
#              4. the OCaml side built with ASan+UBSan (fuzz/asan.workspace,
#                 into _build/asan): the fake's smoke test, a whole
#                 certification of the fake driver, the fault-injection sweep
#                 and the async sweep.  A child's memory error aborts it: a
#                 crash verdict.  Its leak report at exit is not judged: OCaml
#                 does not collect at exit, and devices the runs dropped still
#                 hold their C memory then.
#   make tsan  ThreadSanitizer over the C parts (the OCaml 5.3 here is not a
#              TSan-enabled compiler): proof first that the word-race mutant
#              IS reported, then the corpus with the real worker and a
#              sleeping thread: zero reports.  Run under setarch -R (no ASLR),
#              as TSan needs on some kernels.
# Zero reports on the conforming code, or the target fails.
.PHONY: asan tsan asan-c tsan-c asan-ocaml san-bench

SAN_OUT := out/sanitize
SAN_INC := -Iinclude -Idrivers/fake -Ifuzz
SAN_SRCS := drivers/fake/fake_core.c fuzz/room_grow_fuzz.c fuzz/fake_adapter.c fuzz/rig_edge_min.c \
  fuzz/standalone_main.c
SAN_DEPS := $(SAN_SRCS) $(wildcard fuzz/*.h) drivers/fake/fake_core.h include/rig_edge.h
SAN_INPUTS = fuzz/corpus/room_grow $(wildcard fuzz/regressions/room_grow) $(wildcard out/fuzz/corpus/room_grow)
SAN_ENV := LSAN_OPTIONS=suppressions=$(abspath fuzz/lsan.supp) UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SETARCH := setarch "$$(uname -m)" -R
SAN_REPORT := 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error|WARNING: ThreadSanitizer|VIOLATION'

$(SAN_OUT)/room_grow_asan: $(SAN_DEPS)
	@mkdir -p $(SAN_OUT)
	clang -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	  $(SAN_INC) -include fuzz/fake_shim.h $(SAN_SRCS) -lpthread -o $@

$(SAN_OUT)/room_grow_tsan: $(SAN_DEPS)
	@mkdir -p $(SAN_OUT)
	clang -O1 -g -fsanitize=thread $(SAN_INC) -include fuzz/fake_shim.h $(SAN_SRCS) -lpthread -o $@

# $(call san_clean,binary,env,log): runs the inputs, fails on any report.
define san_clean
	@echo "== $(3): $(2) $(1) over $(SAN_INPUTS)"
	@$(SAN_ENV) $(2) $(1) $(SAN_INPUTS) > $(SAN_OUT)/$(3).log 2>&1 || \
	  { grep -m5 -E $(SAN_REPORT) $(SAN_OUT)/$(3).log; echo "$(3): FAILED (see $(SAN_OUT)/$(3).log)"; exit 1; }
	@! grep -q -E $(SAN_REPORT) $(SAN_OUT)/$(3).log || { grep -m5 -E $(SAN_REPORT) $(SAN_OUT)/$(3).log; exit 1; }
	@echo "$(3): $$(grep -c '^Running:' $(SAN_OUT)/$(3).log) inputs, no report"
endef

# $(call san_found,binary,env,log,pattern): the mutant's run must report pattern.
define san_found
	@echo "== $(3): $(2) $(1) must report"
	@$(SAN_ENV) $(2) $(1) $(SAN_INPUTS) > $(SAN_OUT)/$(3).log 2>&1; \
	  if grep -q -E $(4) $(SAN_OUT)/$(3).log; then echo "$(3): reported: $$(grep -m1 -E $(4) $(SAN_OUT)/$(3).log)"; \
	  else echo "$(3): NOT reported: a clean run would prove nothing"; exit 1; fi
endef

asan-c: fuzz-regress $(SAN_OUT)/room_grow_asan
	$(call san_clean,$(SAN_OUT)/room_grow_asan,RIG_FUZZ_REAL_WORKER=1,asan-real-worker)
	$(call san_found,$(SAN_OUT)/room_grow_asan,RIG_FUZZ_MUTANT=stop-frees-regions,asan-mutant-uaf,'AddressSanitizer: heap-use-after-free')

asan-ocaml: build
	dune build --workspace fuzz/asan.workspace ./drivers/fake/test/fake_test.exe ./harness/certify/main.exe 2>&1
	@mkdir -p $(SAN_OUT)
	@echo "== asan: the fake's smoke test (_build/asan)"
	@$(SAN_ENV) ./_build/asan/drivers/fake/test/fake_test.exe > $(SAN_OUT)/asan-fake-test.log 2>&1 || \
	  { tail -30 $(SAN_OUT)/asan-fake-test.log; exit 1; }
	@! grep -q -E $(SAN_REPORT) $(SAN_OUT)/asan-fake-test.log
	@echo "asan-fake-test: OK, no report"
	@echo "== asan: certify --driver fake under ASan (_build/asan), without the fault-injection sweep, too slow there"
	@$(SAN_ENV) ./_build/asan/harness/certify/main.exe certify --driver fake --no-sweep -j $(J) \
	  --report $(SAN_OUT)/asan-certify.json > $(SAN_OUT)/asan-certify.log 2>&1 || \
	  { grep -E $(SAN_REPORT)'|fail ' $(SAN_OUT)/asan-certify.log | head; exit 1; }
	@! grep -q -E $(SAN_REPORT) $(SAN_OUT)/asan-certify.log
	@echo "asan-certify: $$(grep -cE '^[A-Z]+-[0-9]+ +pass' $(SAN_OUT)/asan-certify.log) clauses pass, no report"
	@echo "== asan: the fault-injection sweep and the async sweep under ASan"
	@for s in sweep async-sweep; do \
	  $(SAN_ENV) ./_build/asan/harness/certify/main.exe $$s --driver fake -j $(J) --no-color \
	    --report $(SAN_OUT)/asan-$$s.json > $(SAN_OUT)/asan-$$s.log 2>&1 || \
	    { grep -E $(SAN_REPORT)'|fail |FAIL' $(SAN_OUT)/asan-$$s.log | head; echo "asan-$$s: FAILED"; exit 1; }; \
	  ! grep -q -E $(SAN_REPORT) $(SAN_OUT)/asan-$$s.log || exit 1; \
	  echo "asan-$$s: $$(grep -E '^[0-9]+ runs' $(SAN_OUT)/asan-$$s.log), no report"; done

asan: asan-c asan-ocaml

tsan-c: $(SAN_OUT)/room_grow_tsan
	$(call san_found,$(SETARCH) $(SAN_OUT)/room_grow_tsan,RIG_FUZZ_REAL_WORKER=1 RIG_FUZZ_MUTANT=word-race,tsan-mutant-race,'WARNING: ThreadSanitizer: data race')
	$(call san_clean,$(SETARCH) $(SAN_OUT)/room_grow_tsan,RIG_FUZZ_REAL_WORKER=1,tsan-real-worker)

tsan: tsan-c

# make san-bench (part of make bench): the sanitizer builds' slowdown, each a
# ratio of two runs measured here: the room/grow target over its corpus
# (deterministic worker) plain, ASan+UBSan and TSan; certify --no-sweep of
# the fake driver (one seed, -j 1) plain and ASan+UBSan.
$(SAN_OUT)/room_grow_plain: $(SAN_DEPS)
	@mkdir -p $(SAN_OUT)
	clang -O1 -g $(SAN_INC) -include fuzz/fake_shim.h $(SAN_SRCS) -lpthread -o $@

san-bench: build $(SAN_OUT)/room_grow_plain $(SAN_OUT)/room_grow_asan $(SAN_OUT)/room_grow_tsan
	@dune build --workspace fuzz/asan.workspace ./harness/certify/main.exe 2>&1
	@secs() { s=$$(date +%s%N); "$$@" > /dev/null 2>&1; e=$$(date +%s%N); echo $$(( (e - s) / 1000000 )); }; \
	  corpus() { for i in 1 2 3 4 5 6 7 8 9 10; do "$$@" $(SAN_INPUTS) || return 1; done; }; \
	  ratio() { awk -v a=$$1 -v b=$$2 'BEGIN { printf "%.1f", a / b }'; }; \
	  plain=$$(secs corpus $(SAN_OUT)/room_grow_plain); \
	  asan=$$(secs corpus env $(SAN_ENV) $(SAN_OUT)/room_grow_asan); \
	  tsan=$$(secs corpus $(SETARCH) $(SAN_OUT)/room_grow_tsan); \
	  echo "room/grow corpus x10: plain $$plain ms, asan+ubsan $$asan ms (x$$(ratio $$asan $$plain)), tsan $$tsan ms (x$$(ratio $$tsan $$plain))"; \
	  cplain=$$(secs ./_build/default/harness/certify/main.exe certify --no-sweep --seeds 1 -j 1 --no-color --report $(SAN_OUT)/bench-plain.json); \
	  casan=$$(secs env $(SAN_ENV) ./_build/asan/harness/certify/main.exe certify --no-sweep --seeds 1 -j 1 --no-color --report $(SAN_OUT)/bench-asan.json); \
	  echo "certify --no-sweep (1 seed, -j 1): plain $$cplain ms, asan+ubsan $$casan ms (x$$(ratio $$casan $$cplain))"
