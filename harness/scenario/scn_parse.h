/* The parser of the scenario language (scenarios/NAME.scn; the grammar is
 * docs/scenario-language.md).  Pure C, no globals, no I/O: it turns a text
 * into a flat list of statements with typed arguments, or into one error
 * "FILE:LINE:COL: expected <what>, found <what>".  It checks each verb, the
 * shape of its arguments, and the names (declared before use, of the right
 * sort, never declared twice); it never executes anything.  Reentrant; the
 * fuzz target fuzz/parse_fuzz.c holds it to: no crash, no hang, no leak. */
#ifndef SCN_PARSE_H
#define SCN_PARSE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Limits: a longer line, more statements, or more arguments in one
 * statement (separators and, for spawn, the spawned verb count) are
 * errors. */
#define SCN_MAX_LINE 4096
#define SCN_MAX_STMTS 10000
#define SCN_MAX_ARGS 64
/* Integers are accepted in [-SCN_MAX_INT, SCN_MAX_INT] (fits an OCaml int). */
#define SCN_MAX_INT 4611686018427387903LL

enum scn_arg_kind {
  SCN_WORD,   /* an identifier: a name, a keyword, a clause ID */
  SCN_INT,    /* decimal or 0x hex, optional leading '-' */
  SCN_STRING, /* "..." after escapes */
  SCN_SEP,    /* ';' between the parts of a submit */
  SCN_KV      /* KEY=VALUE (configure) */
};

struct scn_arg {
  enum scn_arg_kind kind;
  /* WORD: the word; INT: its text as written; STRING: its bytes after
   * escapes (may contain NUL: use len); SEP: ";"; KV: the value's text.
   * Always NUL-terminated too. */
  const char *text;
  size_t len;
  long long ival;  /* INT; KV whose value is an integer; else 0 */
  const char *key; /* KV: the key (NUL-terminated); else NULL */
  int line, col;   /* 1-based; col counts bytes */
};

struct scn_stmt {
  int line, col;      /* of the verb */
  const char *verb;   /* "scenario", "open", "submit", ... */
  int nargs;
  struct scn_arg *args; /* everything after the verb up to "=>" or the end;
                           for spawn: NAME, the spawned verb (a WORD), its args */
  const char *expect; /* the word after "=>"; NULL when the line has none (= ok) */
};

struct scn_chunk; /* the arena holding every string and array */

struct scn_script {
  int nstmts;
  struct scn_stmt *stmts; /* in file order, scenario/clauses/needs included */
  struct scn_chunk *arena;
};

/* Parses text[0..len) (need not be NUL-terminated, may contain NUL, which
 * is an error).  On success returns 0 and *out (free it with scn_free).
 * Otherwise returns -1, *out = NULL, and err (when errlen > 0) holds the
 * NUL-terminated "file:line:col: message", truncated to errlen. */
int scn_parse(const char *file, const char *text, size_t len,
              struct scn_script **out, char *err, size_t errlen);

/* Frees a script from scn_parse; NULL is a no-op. */
void scn_free(struct scn_script *script);

#ifdef __cplusplus
}
#endif

#endif
