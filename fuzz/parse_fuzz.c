/* libFuzzer target for the scenario parser (harness/scenario/scn_parse.c).
 * Any input either parses, and then every statement is well formed, or
 * fails with an error "fuzz.scn:LINE:COL: message" whose line and column
 * lie within the input; no crash, no hang, no leak (ASan/UBSan, and
 * libFuzzer's -timeout/-rss_limit_mb).  Each input is also parsed with a
 * tiny error buffer, which must stay NUL-terminated and be a prefix of the
 * full message.  Build and run (from the repository's root):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -Iharness/scenario fuzz/parse_fuzz.c harness/scenario/scn_parse.c -o parse_fuzz
 *   ./parse_fuzz -max_total_time=60 -max_len=8192 CORPUS_DIR */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scn_parse.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c)) {                                                               \
      fprintf(stderr, "parse_fuzz: check failed: %s (line %d)\n", #c, __LINE__); \
      abort();                                                                \
    }                                                                         \
  } while (0)

static int lines_in(const uint8_t *d, size_t n) {
  int l = 1;
  for (size_t i = 0; i < n; i++) l += d[i] == '\n';
  return l;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[1024], small[24];
  struct scn_script *s = (struct scn_script *)1;
  int rc = scn_parse("fuzz.scn", (const char *)data, size, &s, err, sizeof err);
  int nlines = lines_in(data, size);
  if (rc == 0) {
    CHECK(s != NULL);
    CHECK(s->nstmts >= 2 && s->nstmts <= SCN_MAX_STMTS);
    CHECK(strcmp(s->stmts[0].verb, "scenario") == 0);
    int prev = 0;
    for (int i = 0; i < s->nstmts; i++) {
      const struct scn_stmt *st = &s->stmts[i];
      CHECK(st->line > prev && st->line <= nlines);
      prev = st->line;
      CHECK(st->col >= 1 && st->col <= SCN_MAX_LINE);
      CHECK(st->verb && st->nargs >= 0 && st->nargs <= SCN_MAX_ARGS);
      for (int j = 0; j < st->nargs; j++) {
        const struct scn_arg *a = &st->args[j];
        CHECK(a->text && a->text[a->len] == 0 && a->line == st->line && a->col > st->col);
        CHECK((a->kind == SCN_KV) == (a->key != NULL));
        CHECK(a->ival >= -SCN_MAX_INT && a->ival <= SCN_MAX_INT);
        if (a->kind == SCN_WORD || a->kind == SCN_INT || a->kind == SCN_KV)
          CHECK(strlen(a->text) == a->len);
        if (a->kind == SCN_SEP) CHECK(strcmp(st->verb, "submit") == 0 || strcmp(st->verb, "spawn") == 0);
      }
    }
    scn_free(s);
  } else {
    int line = 0, col = 0, used = 0;
    CHECK(rc == -1 && s == NULL);
    CHECK(strlen(err) < sizeof err);
    CHECK(sscanf(err, "fuzz.scn:%d:%d: %n", &line, &col, &used) == 2 && used > 0);
    CHECK(line >= 1 && line <= nlines && col >= 1 && col <= SCN_MAX_LINE + 1);
    CHECK(strncmp(err + used, "expected ", 9) == 0 || strcmp(err + used, "out of memory") == 0);
  }
  /* Same verdict with a tiny error buffer, truncated but terminated. */
  memset(small, 'X', sizeof small);
  int rc2 = scn_parse("fuzz.scn", (const char *)data, size, NULL, small, sizeof small);
  CHECK(rc2 == rc);
  CHECK(memchr(small, 0, sizeof small) != NULL);
  if (rc) CHECK(strncmp(small, err, strlen(small)) == 0);
  return 0;
}
