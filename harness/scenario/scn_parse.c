/* The parser of the scenario language: lines -> tokens -> checked
 * statements.  See scn_parse.h for the API and docs/scenario-language.md
 * for the grammar.  All memory of a script lives in one arena of chunks
 * (plus the statement array); the name table lives only during a parse.
 * Every loop advances over the input or is bounded by SCN_MAX_ARGS, so the
 * time is linear in the input. */
#include "scn_parse.h"

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

struct scn_chunk {
  struct scn_chunk *next;
  size_t used, cap;
  max_align_t data[];
};

#define CHUNK_BYTES 16384

static void *arena_alloc(struct scn_script *s, size_t n) {
  const size_t align = sizeof(max_align_t);
  struct scn_chunk *c = s->arena;
  if (n > SIZE_MAX / 2) return NULL;
  n = (n + align - 1) / align * align;
  if (n == 0) n = align;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->next = s->arena;
    c->used = 0;
    c->cap = cap;
    s->arena = c;
  }
  void *r = (char *)c->data + c->used;
  c->used += n;
  return r;
}

void scn_free(struct scn_script *s) {
  if (!s) return;
  struct scn_chunk *c = s->arena;
  while (c) {
    struct scn_chunk *n = c->next;
    free(c);
    c = n;
  }
  free(s->stmts);
  free(s);
}

/* ---------------------------------------------------------------- types */

enum tk { T_WORD, T_INT, T_STR, T_SEP, T_KV, T_ARROW, T_EOL };

struct tok {
  enum tk k;
  int col;
  const char *src; /* in the input */
  size_t srclen;
  const char *val; /* arena copy: word, int text, string bytes, KV value */
  size_t vlen;
  long long ival;
  int kv_int;      /* KV: the value is an integer */
  const char *key; /* KV: arena copy */
};

/* Sorts of names, as bits. */
enum {
  S_DEV = 1, S_BUF = 2, S_PEER = 4, S_HOST = 8, S_IMG = 16, S_ENT = 32,
  S_SUB = 64, S_THR = 128,
  S_REGION = S_BUF | S_PEER | S_HOST
};

struct name {
  const char *s; /* NULL: empty slot */
  size_t len;
  int sort, line, closed;
};

/* verb + 64 args + "=>" + outcome + end of line, and one more to detect
 * overflow. */
#define MAX_TOKS (SCN_MAX_ARGS + 5)

struct P {
  const char *file;
  char *err;
  size_t errlen;
  struct scn_script *s;
  size_t stmt_cap;
  struct name *names;
  size_t ncap, ncount;
  int line;
  const char *l; /* the current line, without its end */
  size_t llen;
  struct tok toks[MAX_TOKS];
  int ntok, ti, overflow;
  int scenario_line, clauses_line, needs_line, drives_line, body_line;
  struct {
    const struct tok *t;
    int sort;
  } pending[2];
  int npending;
};

/* ---------------------------------------------------------------- errors */

static int failv(struct P *p, int line, int col, const char *fmt, va_list ap) {
  if (p->err && p->errlen > 0) {
    int n = snprintf(p->err, p->errlen, "%s:%d:%d: ", p->file, line, col);
    if (n >= 0 && (size_t)n < p->errlen)
      vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
  }
  return -1;
}

static int fail_at(struct P *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(struct P *p, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  failv(p, line, col, fmt, ap);
  va_end(ap);
  return -1;
}

static int fail(struct P *p, int col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct P *p, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  failv(p, p->line, col, fmt, ap);
  va_end(ap);
  return -1;
}

/* Quotes src[0..n) for a message: printable ASCII kept, the rest as \xHH,
 * at most ~40 bytes shown. */
static const char *quote(const char *src, size_t n, char *buf, size_t bn) {
  size_t o = 0, i;
  static const char hex[] = "0123456789abcdef";
  if (bn < 8) return "";
  buf[o++] = '\'';
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)src[i];
    if (o + 8 >= bn || i >= 40) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      buf[o++] = (char)c;
    } else {
      buf[o++] = '\\';
      buf[o++] = 'x';
      buf[o++] = hex[c >> 4];
      buf[o++] = hex[c & 15];
    }
  }
  buf[o++] = '\'';
  buf[o] = 0;
  return buf;
}

static const char *describe_char(const char *c, char *buf, size_t bn) {
  if (*c == 0) return "a NUL byte";
  if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) {
    snprintf(buf, bn, "byte 0x%02x", (unsigned char)*c);
    return buf;
  }
  return quote(c, 1, buf, bn);
}

static const char *sort_name(int sort) {
  switch (sort) {
  case S_DEV: return "device";
  case S_BUF: return "buffer";
  case S_PEER: return "peer mapping";
  case S_HOST: return "host mapping";
  case S_IMG: return "image";
  case S_ENT: return "entry";
  case S_SUB: return "submission";
  case S_THR: return "thread";
  }
  return "name";
}

static const char *sort_what(int mask) {
  switch (mask) {
  case S_DEV: return "a device name";
  case S_BUF: return "a buffer name";
  case S_REGION: return "a buffer or mapping name";
  case S_IMG: return "an image name";
  case S_ENT: return "an entry name";
  case S_SUB: return "a submission name";
  case S_THR: return "a thread name";
  }
  return "a name";
}

static const char *describe(const struct tok *t, char *buf, size_t bn) {
  char q[80];
  switch (t->k) {
  case T_WORD: return quote(t->src, t->srclen, buf, bn);
  case T_INT: snprintf(buf, bn, "integer %s", quote(t->src, t->srclen, q, sizeof q)); return buf;
  case T_STR: return "a string";
  case T_SEP: return "';'";
  case T_KV: return quote(t->src, t->srclen, buf, bn);
  case T_ARROW: return "'=>'";
  case T_EOL: return "end of line";
  }
  return "?";
}

static int expected(struct P *p, const struct tok *t, const char *what) {
  char buf[128];
  return fail(p, t->col, "expected %s, found %s", what, describe(t, buf, sizeof buf));
}

/* ---------------------------------------------------------------- names */

static uint64_t hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

static struct name *lookup(struct P *p, const char *s, size_t n) {
  if (!p->names) return NULL;
  size_t m = p->ncap - 1, i = (size_t)hash(s, n) & m;
  while (p->names[i].s) {
    if (p->names[i].len == n && memcmp(p->names[i].s, s, n) == 0) return &p->names[i];
    i = (i + 1) & m;
  }
  return NULL;
}

/* Inserts a name not in the table; -1 on out of memory. */
static int insert(struct P *p, const char *s, size_t n, int sort, int line) {
  if (2 * (p->ncount + 1) > p->ncap) {
    size_t cap = p->ncap ? 2 * p->ncap : 64;
    struct name *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t j = 0; j < p->ncap; j++) {
      if (!p->names[j].s) continue;
      size_t i = (size_t)hash(p->names[j].s, p->names[j].len) & (cap - 1);
      while (t[i].s) i = (i + 1) & (cap - 1);
      t[i] = p->names[j];
    }
    free(p->names);
    p->names = t;
    p->ncap = cap;
  }
  size_t m = p->ncap - 1, i = (size_t)hash(s, n) & m;
  while (p->names[i].s) i = (i + 1) & m;
  p->names[i].s = s;
  p->names[i].len = n;
  p->names[i].sort = sort;
  p->names[i].line = line;
  p->names[i].closed = 0;
  p->ncount++;
  return 0;
}

/* ---------------------------------------------------------------- lexer */

static int is_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
static int is_ident(char c) {
  return is_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static char *copy(struct P *p, const char *s, size_t n) {
  char *r = arena_alloc(p->s, n + 1);
  if (!r) return NULL;
  memcpy(r, s, n);
  r[n] = 0;
  return r;
}

static int oom(struct P *p, int col) { return fail(p, col, "out of memory"); }

/* Scans an integer token at l[i..); sets *end.  0 ok, -1 error (reported). */
static int lex_int(struct P *p, size_t i, size_t *end, long long *v) {
  const char *l = p->l;
  size_t j = i, k;
  int neg = 0;
  unsigned long long acc = 0;
  char q[80];
  if (l[j] == '-') j++;
  while (j < p->llen && is_ident(l[j])) j++;
  *end = j;
  k = i;
  if (l[k] == '-') {
    neg = 1;
    k++;
  }
  int ok = k < j;
  if (ok && j - k > 2 && l[k] == '0' && (l[k + 1] == 'x' || l[k + 1] == 'X')) {
    for (k += 2; k < j && ok; k++) {
      int h = hexval(l[k]);
      if (h < 0) ok = 0;
      else if (acc > ((unsigned long long)SCN_MAX_INT >> 4)) goto range;
      else acc = acc * 16 + (unsigned)h;
    }
  } else {
    for (; k < j && ok; k++) {
      if (!is_digit(l[k])) ok = 0;
      else if (acc > (unsigned long long)SCN_MAX_INT / 10) goto range;
      else acc = acc * 10 + (unsigned)(l[k] - '0');
    }
  }
  if (!ok)
    return fail(p, (int)i + 1, "expected an integer (decimal or 0x hex), found %s",
                quote(l + i, j - i, q, sizeof q));
  if (acc > (unsigned long long)SCN_MAX_INT) goto range;
  *v = neg ? -(long long)acc : (long long)acc;
  return 0;
range:
  return fail(p, (int)i + 1, "expected an integer between -%lld and %lld, found %s",
              SCN_MAX_INT, SCN_MAX_INT, quote(l + i, j - i, q, sizeof q));
}

/* After a word, integer, string or KEY=VALUE: a space, a tab, the end, a
 * comment, ';' or "=>". */
static int boundary(struct P *p, size_t j, const struct tok *t) {
  char c, b1[64], b2[128];
  if (j >= p->llen) return 0;
  c = p->l[j];
  if (c == ' ' || c == '\t' || c == '#' || c == ';') return 0;
  if (c == '=' && j + 1 < p->llen && p->l[j + 1] == '>') return 0;
  return fail(p, (int)j + 1, "expected a space after %s, found %s", describe(t, b2, sizeof b2),
              describe_char(&p->l[j], b1, sizeof b1));
}

static int lex_string(struct P *p, size_t i, size_t *end, struct tok *t) {
  const char *l = p->l;
  size_t j = i + 1, o = 0;
  char b[64];
  /* The unescaped bytes are never longer than the raw ones. */
  char *out = arena_alloc(p->s, p->llen - i + 1);
  if (!out) return oom(p, (int)i + 1);
  for (;;) {
    if (j >= p->llen)
      return fail(p, (int)i + 1,
                  "expected a '\"' closing the string that starts here, found end of line");
    unsigned char c = (unsigned char)l[j];
    if (c == '"') break;
    if (c == '\\') {
      if (j + 1 >= p->llen)
        return fail(p, (int)j + 1, "expected an escape (\\\" \\\\ \\n \\t \\xHH), found end of line");
      char e = l[j + 1];
      if (e == '"' || e == '\\') out[o++] = e;
      else if (e == 'n') out[o++] = '\n';
      else if (e == 't') out[o++] = '\t';
      else if (e == 'x' && j + 3 < p->llen && hexval(l[j + 2]) >= 0 && hexval(l[j + 3]) >= 0) {
        out[o++] = (char)(hexval(l[j + 2]) * 16 + hexval(l[j + 3]));
        j += 2;
      } else
        return fail(p, (int)j + 1, "expected an escape (\\\" \\\\ \\n \\t \\xHH), found %s",
                    quote(l + j, (e == 'x' ? (p->llen - j < 4 ? p->llen - j : 4) : 2), b, sizeof b));
      j += 2;
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return fail(p, (int)j + 1, "expected a printable character or an escape in a string, found %s",
                  describe_char(&l[j], b, sizeof b));
    out[o++] = (char)c;
    j++;
  }
  out[o] = 0;
  t->val = out;
  t->vlen = o;
  *end = j + 1;
  return 0;
}

/* Splits the current line into p->toks, ending with T_EOL. */
static int lex_line(struct P *p) {
  const char *l = p->l;
  size_t n = p->llen, i = 0;
  char b[64];
  p->ntok = 0;
  p->overflow = 0;
  for (;;) {
    while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
    struct tok *t = &p->toks[p->ntok];
    memset(t, 0, sizeof *t);
    t->col = (int)i + 1;
    t->src = l + i;
    if (p->ntok == MAX_TOKS - 1 && i < n && l[i] != '#') {
      /* Too many tokens: statement() reports it; the rest is not read. */
      p->overflow = 1;
      t->k = T_EOL;
      p->ntok++;
      return 0;
    }
    if (i >= n || l[i] == '#') {
      /* A comment runs to the end of the line; only NUL is refused in it. */
      const char *z = i < n ? memchr(l + i, 0, n - i) : NULL;
      if (z) return fail(p, (int)(z - l) + 1, "expected text, found a NUL byte");
      t->k = T_EOL;
      p->ntok++;
      return 0;
    }
    char c = l[i];
    size_t j = i;
    if (c == ';') {
      t->k = T_SEP;
      t->val = ";";
      t->vlen = 1;
      j = i + 1;
    } else if (c == '=' && i + 1 < n && l[i + 1] == '>') {
      t->k = T_ARROW;
      j = i + 2;
    } else if (c == '"') {
      t->k = T_STR;
      if (lex_string(p, i, &j, t)) return -1;
    } else if (is_digit(c) || (c == '-' && i + 1 < n && is_digit(l[i + 1]))) {
      t->k = T_INT;
      if (lex_int(p, i, &j, &t->ival)) return -1;
    } else if (is_start(c)) {
      j = i;
      while (j < n && is_ident(l[j])) j++;
      if (j < n && l[j] == '=' && !(j + 1 < n && l[j + 1] == '>')) {
        size_t v = j + 1, e;
        t->k = T_KV;
        if (!(t->key = copy(p, l + i, j - i))) return oom(p, (int)i + 1);
        if (v < n && is_start(l[v])) {
          e = v;
          while (e < n && is_ident(l[e])) e++;
        } else if (v < n && (is_digit(l[v]) || (l[v] == '-' && v + 1 < n && is_digit(l[v + 1])))) {
          if (lex_int(p, v, &e, &t->ival)) return -1;
          t->kv_int = 1;
        } else {
          return fail(p, (int)v + 1, "expected an integer or a word after '=', found %s",
                      v < n ? describe_char(&l[v], b, sizeof b) : "end of line");
        }
        if (!(t->val = copy(p, l + v, e - v))) return oom(p, (int)i + 1);
        t->vlen = e - v;
        j = e;
      } else {
        t->k = T_WORD;
        if (!(t->val = copy(p, l + i, j - i))) return oom(p, (int)i + 1);
        t->vlen = j - i;
      }
    } else {
      return fail(p, (int)i + 1, "expected a word, an integer, a string, ';' or '=>', found %s",
                  describe_char(&l[i], b, sizeof b));
    }
    t->srclen = j - i;
    if (t->k == T_INT) {
      if (!(t->val = copy(p, l + i, j - i))) return oom(p, (int)i + 1);
      t->vlen = j - i;
    }
    if (t->k != T_SEP && t->k != T_ARROW && boundary(p, j, t)) return -1;
    p->ntok++;
    i = j;
  }
}

/* ---------------------------------------------------------------- grammar */

static const char *const FNS[] = {"alloc", "free", "map_peer", "map_host", "dma",
                                  "image", "entry", "prepare", "grow", "signaled",
                                  "sleep", "unload", "reach", "room", "submit", "commit", NULL};
#define FNS_WHAT "a function (alloc, free, map_peer, map_host, dma, image, entry, prepare, grow, signaled, sleep, unload, reach, room, submit or commit)"
static const char *const KINDS[] = {"device", "mapped", "pinned", NULL};
static const char *const ROLES[] = {"spin", "fault", "hang", "fill", "scratch", "absent", NULL};
#define ROLES_WHAT "a role (spin, fault, hang, fill, scratch or absent)"
static const char *const OUTCOMES[] = {"ok", "lost", "out_of_memory", "invalid_argument",
                                       "error", "absent", NULL};
static const char *const INT_KEYS[] = {"device_bytes", "mapped_bytes", "pinned_bytes",
                                       "queue_slots", NULL};
static const char *const BOOL_KEYS[] = {"may_block", "host_addresses", "maps_host", NULL};
#define KEYS_WHAT "KEY=VALUE (device_bytes, mapped_bytes, pinned_bytes, queue_slots, may_block, host_addresses or maps_host)"

static int in_set(const struct tok *t, const char *const *set) {
  if (t->k != T_WORD) return -1;
  for (int i = 0; set[i]; i++)
    if (strlen(set[i]) == t->vlen && memcmp(set[i], t->val, t->vlen) == 0) return i;
  return -1;
}

static const struct tok *next(struct P *p) {
  const struct tok *t = &p->toks[p->ti];
  if (t->k != T_EOL) p->ti++;
  return t;
}
static const struct tok *peek(struct P *p) { return &p->toks[p->ti]; }

static int g_kw(struct P *p, const char *const *set, const char *what, int *which) {
  const struct tok *t = next(p);
  int i = in_set(t, set);
  if (i < 0) return expected(p, t, what);
  if (which) *which = i;
  return 0;
}

static int g_int(struct P *p, long long min, long long max, const char *what) {
  const struct tok *t = next(p);
  if (t->k != T_INT || t->ival < min || t->ival > max) return expected(p, t, what);
  return 0;
}

static int g_str(struct P *p, const char *what) {
  const struct tok *t = next(p);
  if (t->k != T_STR) return expected(p, t, what);
  return 0;
}

static int g_new(struct P *p, int sort) {
  const struct tok *t = next(p);
  char what[64], b[128];
  snprintf(what, sizeof what, "a new %s name", sort_name(sort));
  if (t->k != T_WORD) return expected(p, t, what);
  for (int i = 0; i < p->npending; i++)
    if (p->pending[i].t->vlen == t->vlen && memcmp(p->pending[i].t->val, t->val, t->vlen) == 0)
      return fail(p, t->col, "expected %s, found %s, already declared on this line", what,
                  describe(t, b, sizeof b));
  struct name *nm = lookup(p, t->val, t->vlen);
  if (nm && !(nm->sort == S_DEV && sort == S_DEV && nm->closed))
    return fail(p, t->col, "expected %s, found %s, already declared at line %d as a %s%s", what,
                describe(t, b, sizeof b), nm->line, sort_name(nm->sort),
                nm->sort == S_DEV ? " (a device name is reused only after its close)" : "");
  p->pending[p->npending].t = t;
  p->pending[p->npending].sort = sort;
  p->npending++;
  return 0;
}

/* A declared name of a sort in mask; *nm gets its entry. */
static int g_ref_tok(struct P *p, const struct tok *t, int mask, const char *what, struct name **out) {
  char b[128];
  if (t->k != T_WORD) return expected(p, t, what);
  struct name *nm = lookup(p, t->val, t->vlen);
  if (!nm)
    return fail(p, t->col, "expected %s, found %s, which is not declared", what,
                describe(t, b, sizeof b));
  if (!(nm->sort & mask))
    return fail(p, t->col, "expected %s, found %s %.*s (declared at line %d)", what,
                sort_name(nm->sort), (int)t->vlen, t->val, nm->line);
  if (out) *out = nm;
  return 0;
}

static int g_ref(struct P *p, int mask) {
  return g_ref_tok(p, next(p), mask, sort_what(mask), NULL);
}

static int g_configure(struct P *p) {
  unsigned seen = 0;
  char b[128];
  const struct tok *t = peek(p);
  if (t->k != T_KV) return expected(p, t, KEYS_WHAT);
  while ((t = peek(p))->k == T_KV) {
    int ik = -1, bk = -1;
    for (int i = 0; INT_KEYS[i]; i++)
      if (strcmp(INT_KEYS[i], t->key) == 0) ik = i;
    for (int i = 0; BOOL_KEYS[i]; i++)
      if (strcmp(BOOL_KEYS[i], t->key) == 0) bk = i;
    int bit = ik >= 0 ? ik : bk >= 0 ? 8 + bk : -1;
    if (bit < 0)
      return fail(p, t->col, "expected a key (device_bytes, mapped_bytes, pinned_bytes, queue_slots, "
                             "may_block, host_addresses or maps_host), found %s",
                  quote(t->key, strlen(t->key), b, sizeof b));
    if (seen & (1u << bit))
      return fail(p, t->col, "expected a key not already given on this line, found %s again",
                  quote(t->key, strlen(t->key), b, sizeof b));
    seen |= 1u << bit;
    int vcol = t->col + (int)strlen(t->key) + 1;
    if (ik >= 0) {
      long long min = strcmp(t->key, "queue_slots") == 0 ? 1 : 0;
      if (!t->kv_int || t->ival < min)
        return fail(p, vcol, "expected an integer >= %lld for %s, found %s", min, t->key,
                    quote(t->val, t->vlen, b, sizeof b));
    } else if (t->kv_int || !(strcmp(t->val, "true") == 0 || strcmp(t->val, "false") == 0)) {
      return fail(p, vcol, "expected true or false for %s, found %s", t->key,
                  quote(t->val, t->vlen, b, sizeof b));
    }
    next(p);
  }
  return 0;
}

static int g_inject(struct P *p) {
  static const char *const K[] = {"fault", "raise", "fail", "answer", NULL};
  int k = 0;
  if (g_kw(p, FNS, FNS_WHAT, NULL)) return -1;
  if (g_int(p, 1, SCN_MAX_INT, "an occurrence (an integer >= 1)")) return -1;
  if (g_kw(p, K, "a failure (fault \"why\", raise \"text\", fail or answer)", &k)) return -1;
  if (k == 0) return g_str(p, "a string (why the device faults)");
  if (k == 1) return g_str(p, "a string (the exception's text)");
  return 0;
}

static int g_load(struct P *p) {
  static const char *const K[] = {"kit", "refused", "scratch", NULL};
  int k = 0;
  if (g_new(p, S_IMG) || g_ref(p, S_DEV)) return -1;
  if (g_kw(p, K, "an image (kit, refused or scratch N)", &k)) return -1;
  if (k == 2) return g_int(p, 0, SCN_MAX_INT, "a scratch size (an integer >= 0)");
  return 0;
}

static int g_submit(struct P *p) {
  static const char *const K[] = {"fill", "copy", "launch", NULL};
  int k = 0;
  if (g_new(p, S_SUB) || g_ref(p, S_DEV)) return -1;
  for (;;) {
    if (g_kw(p, K, "a part (fill, copy or launch)", &k)) return -1;
    if (k == 0) {
      if (g_ref(p, S_REGION) || g_int(p, 0, SCN_MAX_INT, "an offset (an integer >= 0)") ||
          g_int(p, 0, SCN_MAX_INT, "a length (an integer >= 0)") ||
          g_int(p, 0, 255, "a byte (an integer from 0 to 255)"))
        return -1;
    } else if (k == 1) {
      if (g_ref(p, S_REGION) || g_int(p, 0, SCN_MAX_INT, "an offset (an integer >= 0)") ||
          g_ref(p, S_REGION) || g_int(p, 0, SCN_MAX_INT, "an offset (an integer >= 0)") ||
          g_int(p, 0, SCN_MAX_INT, "a length (an integer >= 0)"))
        return -1;
    } else {
      int n = 0;
      if (g_ref(p, S_ENT)) return -1;
      while (peek(p)->k == T_WORD || peek(p)->k == T_INT) {
        const struct tok *t = next(p);
        if (n == 5) return expected(p, t, "';' or the end of the line (launch takes at most 5 arguments)");
        if (t->k == T_WORD &&
            g_ref_tok(p, t, S_REGION, "a buffer or mapping name or an integer", NULL))
          return -1;
        n++;
      }
    }
    if (peek(p)->k != T_SEP) return 0;
    next(p);
  }
}

enum verb {
  V_SCENARIO, V_CLAUSES, V_NEEDS, V_DRIVES, V_CONFIGURE, V_INJECT, V_OPEN, V_CLOSE, V_ALLOC, V_FREE,
  V_MAP_PEER, V_MAP_HOST, V_DMA, V_WRITE, V_READ, V_LOAD, V_UNLOAD, V_ENTRY, V_PREPARE,
  V_SUBMIT, V_WAIT, V_SPAWN, V_AWAIT_CALL, V_JOIN, V_SCHEDULE, V_SCHEDULE_MUTANT, V_SLEEP, V_SIGNALED,
  V_PEER, V_ENCODE, V_COMMIT, V_COUNT
};
static const char *const VERBS[] = {
    "scenario", "clauses", "needs", "drives", "configure", "inject", "open", "close", "alloc",
    "free", "map_peer", "map_host", "dma", "write", "read", "load", "unload", "entry",
    "prepare", "submit", "wait", "spawn", "await_call", "join", "schedule", "schedule_mutant", "sleep", "signaled",
    "peer", "encode", "commit", NULL};
#define VERBS_WHAT "a statement (scenario, clauses, needs, drives, configure, inject, open, close, alloc, free, map_peer, map_host, dma, write, read, load, unload, entry, prepare, submit, wait, spawn, await_call, join, schedule, schedule_mutant, sleep, signaled, peer, encode or commit)"

/* Calls only a scenario that drives the driver directly makes. */
static int driver_only(int v) { return v == V_SLEEP || v == V_SIGNALED || v == V_PEER || v == V_ENCODE || v == V_COMMIT; }

/* The fake's knobs and the fuzzer's schedules: only after "needs fake". */
static int fake_only(int v) {
  return v == V_CONFIGURE || v == V_INJECT || v == V_SCHEDULE || v == V_SCHEDULE_MUTANT;
}

/* schedule "HEX": the bytes of a room/grow fuzz input, two hex digits each
 * ("" is the empty input, a valid schedule too).  The digits are checked on
 * the source text, so that an error points at the column of the offending
 * character; escapes are not hex digits. */
static int g_schedule(struct P *p) {
  const struct tok *t = next(p);
  char b[64];
  if (t->k != T_STR) return expected(p, t, "a string of hex digits (the fuzz input's bytes)");
  size_t n = t->srclen - 2; /* between the quotes */
  for (size_t i = 0; i < n; i++)
    if (hexval(t->src[1 + i]) < 0)
      return fail(p, t->col + 1 + (int)i, "expected a hex digit (0-9, a-f, A-F) in a schedule, found %s",
                  describe_char(&t->src[1 + i], b, sizeof b));
  if (n % 2)
    return fail(p, t->col, "expected an even number of hex digits (two per byte), found %zu", n);
  return 0;
}

/* The arguments of an action (not scenario/clauses/needs), cursor after
 * the verb. */
static int g_action(struct P *p, enum verb v) {
  switch (v) {
  case V_CONFIGURE: return g_configure(p);
  case V_INJECT: return g_inject(p);
  case V_OPEN: return g_new(p, S_DEV) || g_int(p, 0, SCN_MAX_INT, "an opener index (an integer >= 0)");
  case V_CLOSE: {
    struct name *nm = NULL;
    const struct tok *t = next(p);
    if (g_ref_tok(p, t, S_DEV, sort_what(S_DEV), &nm)) return -1;
    /* "now": stop with the work still running (drives driver) */
    if (peek(p)->k == T_WORD && peek(p)->vlen == 3 && memcmp(peek(p)->val, "now", 3) == 0) next(p);
    return 0;
  }
  case V_ALLOC:
    return g_new(p, S_BUF) || g_ref(p, S_DEV) ||
           g_kw(p, KINDS, "a memory kind (device, mapped or pinned)", NULL) ||
           g_int(p, 1, SCN_MAX_INT, "a size (an integer > 0)");
  case V_FREE: return g_ref(p, S_REGION);
  case V_MAP_PEER: return g_new(p, S_PEER) || g_ref(p, S_DEV) || g_ref(p, S_BUF);
  case V_MAP_HOST:
    if (g_new(p, S_HOST) || g_ref(p, S_DEV) || g_int(p, 1, SCN_MAX_INT, "a size (an integer > 0)")) return -1;
    /* "over HOST": the pages of an earlier host mapping (drives driver) */
    if (peek(p)->k == T_WORD && peek(p)->vlen == 4 && memcmp(peek(p)->val, "over", 4) == 0) {
      next(p);
      return g_ref(p, S_HOST);
    }
    return 0;
  case V_DMA: return g_ref(p, S_REGION) || g_str(p, "a string (the bus's name)");
  case V_WRITE:
    return g_ref(p, S_REGION) || g_int(p, 0, SCN_MAX_INT, "an offset (an integer >= 0)") ||
           g_str(p, "a string (the bytes to write)");
  case V_READ:
    return g_ref(p, S_REGION) || g_int(p, 0, SCN_MAX_INT, "an offset (an integer >= 0)") ||
           g_str(p, "a string (the bytes expected)");
  case V_LOAD: return g_load(p);
  case V_UNLOAD: return g_ref(p, S_IMG);
  case V_ENTRY: return g_new(p, S_ENT) || g_ref(p, S_IMG) || g_kw(p, ROLES, ROLES_WHAT, NULL);
  case V_PREPARE: return g_ref(p, S_IMG) || g_kw(p, ROLES, ROLES_WHAT, NULL);
  case V_SUBMIT: return g_submit(p);
  case V_WAIT: return g_ref(p, S_DEV) || g_ref(p, S_SUB);
  case V_AWAIT_CALL: return g_kw(p, FNS, FNS_WHAT, NULL);
  case V_JOIN: return g_ref(p, S_THR);
  case V_SCHEDULE: return g_schedule(p);
  case V_SLEEP: {
    static const char *const K[] = {"current", "other", NULL};
    return g_ref(p, S_DEV) || g_kw(p, K, "what sleep sees (current or other)", NULL) ||
           g_int(p, 0, SCN_MAX_INT, "still_ms (an integer >= 0)");
  }
  case V_SIGNALED: return g_ref(p, S_DEV);
  case V_PEER: return g_ref(p, S_DEV) || g_ref(p, S_DEV);
  case V_ENCODE: return g_submit(p); /* a submit left uncommitted */
  case V_COMMIT: return g_ref(p, S_DEV);
  case V_SCHEDULE_MUTANT: {
    /* The name is checked by the interpreter, which knows the fuzzer's mutants. */
    const struct tok *t = next(p);
    if (t->k != T_WORD && !(t->k == T_INT && t->ival >= 0))
      return expected(p, t, "a mutant of the fuzzer (a name like grow-writes-queue, none, or a code >= 0)");
    return 0;
  }
  default: return -1; /* not reached: spawn and the header are handled by the caller */
  }
}

static int header_before_body(struct P *p, const struct tok *vt, enum verb v) {
  char b[64];
  if (p->scenario_line == 0 && v != V_SCENARIO)
    return fail(p, vt->col, "expected 'scenario \"a name\"' as the first statement, found %s",
                describe(vt, b, sizeof b));
  if (v == V_SCENARIO && p->scenario_line)
    return fail(p, vt->col, "expected one scenario statement (the first is at line %d), found another",
                p->scenario_line);
  if (p->body_line && (v == V_CLAUSES || v == V_NEEDS || v == V_DRIVES))
    return fail(p, vt->col, "expected %s before the first action (line %d), found it after",
                VERBS[v], p->body_line);
  if (v == V_CLAUSES && p->clauses_line)
    return fail(p, vt->col, "expected one clauses statement (the first is at line %d), found another",
                p->clauses_line);
  if (v == V_NEEDS && p->needs_line)
    return fail(p, vt->col, "expected one needs statement (the first is at line %d), found another",
                p->needs_line);
  if (v == V_DRIVES && p->drives_line)
    return fail(p, vt->col, "expected one drives statement (the first is at line %d), found another",
                p->drives_line);
  if (v > V_NEEDS && !p->clauses_line)
    return fail(p, vt->col, "expected 'clauses' (the clause IDs it exercises) before the first action, found %s",
                describe(vt, b, sizeof b));
  return 0;
}

static int clause_shape(const struct tok *t) {
  size_t i = 0, n = t->vlen;
  const char *s = t->val;
  if (t->k != T_WORD) return 0;
  while (i < n && s[i] >= 'A' && s[i] <= 'Z') i++;
  if (i == 0 || i >= n || s[i] != '-') return 0;
  size_t d = ++i;
  while (i < n && is_digit(s[i])) i++;
  if (i == d) return 0;
  if (i < n && s[i] >= 'a' && s[i] <= 'z') i++;
  return i == n;
}

/* Parses the tokens of the current line into a statement. */
static int statement(struct P *p) {
  const struct tok *vt = &p->toks[0];
  char b[128];
  int v, inner = -1;
  p->ti = 1;
  p->npending = 0;
  if (vt->k != T_WORD) return expected(p, vt, VERBS_WHAT);
  if ((v = in_set(vt, VERBS)) < 0) return expected(p, vt, VERBS_WHAT);
  /* Limits first: more than SCN_MAX_ARGS tokens before "=>" or the end,
   * then (past the lexer's cut) too much after "=> OUTCOME". */
  {
    int a = 1;
    while (p->toks[a].k != T_EOL && p->toks[a].k != T_ARROW) a++;
    if (a - 1 > SCN_MAX_ARGS)
      return fail(p, p->toks[SCN_MAX_ARGS + 1].col, "expected at most %d arguments, found more",
                  SCN_MAX_ARGS);
    if (p->overflow)
      return expected(p, &p->toks[a + 2 < p->ntok ? a + 2 : p->ntok - 1], "the end of the line");
  }
  if (header_before_body(p, vt, (enum verb)v)) return -1;
  if (p->s->nstmts >= SCN_MAX_STMTS)
    return fail(p, vt->col, "expected at most %d statements, found more", SCN_MAX_STMTS);

  switch ((enum verb)v) {
  case V_SCENARIO: {
    const struct tok *t = next(p);
    if (t->k != T_STR || t->vlen == 0) return expected(p, t, "a non-empty string (the scenario's name)");
    break;
  }
  case V_CLAUSES: {
    const struct tok *t = peek(p);
    if (!clause_shape(t)) return expected(p, t, "a clause ID (like CNT-6)");
    while ((t = peek(p))->k != T_EOL && t->k != T_ARROW) {
      if (!clause_shape(t)) return expected(p, t, "a clause ID (like CNT-6) or the end of the line");
      for (int i = 1; i < p->ti; i++)
        if (p->toks[i].vlen == t->vlen && memcmp(p->toks[i].val, t->val, t->vlen) == 0)
          return fail(p, t->col, "expected a clause ID not already listed, found %s again",
                      describe(t, b, sizeof b));
      next(p);
    }
    break;
  }
  case V_NEEDS: {
    static const char *const K[] = {"fake", NULL};
    if (g_kw(p, K, "'fake' (the fake driver's knobs)", NULL)) return -1;
    break;
  }
  case V_DRIVES: {
    static const char *const K[] = {"driver", NULL};
    if (g_kw(p, K, "'driver' (the statements call the driver directly, as the model does)", NULL)) return -1;
    break;
  }
  case V_SPAWN: {
    const struct tok *t;
    if (g_new(p, S_THR)) return -1;
    t = next(p);
    inner = in_set(t, VERBS);
    if (inner < 0 || inner == V_SCENARIO || inner == V_CLAUSES || inner == V_NEEDS || inner == V_DRIVES || inner == V_SPAWN ||
        inner == V_SCHEDULE || inner == V_SCHEDULE_MUTANT)
      return expected(p, t, "a statement to run on the thread (any but scenario, clauses, needs, spawn, schedule and schedule_mutant)");
    if (fake_only(inner) && !p->needs_line)
      return fail(p, t->col, "expected 'needs fake' before %s (its knobs are the fake driver's), found none",
                  VERBS[inner]);
    if (driver_only(inner) && !p->drives_line)
      return fail(p, t->col, "expected 'drives driver' before %s (rig makes that call itself), found none",
                  VERBS[inner]);
    if (g_action(p, (enum verb)inner)) return -1;
    break;
  }
  default:
    if (fake_only(v) && !p->needs_line)
      return fail(p, vt->col, "expected 'needs fake' before %s (its knobs are the fake driver's), found none",
                  VERBS[v]);
    if (driver_only(v) && !p->drives_line)
      return fail(p, vt->col, "expected 'drives driver' before %s (rig makes that call itself), found none",
                  VERBS[v]);
    if (g_action(p, (enum verb)v)) return -1;
  }

  /* The end: "=> OUTCOME" where allowed, then the end of the line. */
  int nargs = p->ti - 1;
  const char *expect = NULL;
  const struct tok *t = peek(p);
  int arrow_ok = v > V_INJECT && v != V_SPAWN && v != V_SCHEDULE && v != V_SCHEDULE_MUTANT;
  if (t->k == T_ARROW && v == V_SPAWN)
    return fail(p, t->col, "expected the end of the line (a spawned statement's outcome is "
                           "checked by its join: join T => OUTCOME), found '=>'");
  if (t->k == T_ARROW && arrow_ok) {
    int o;
    next(p);
    const struct tok *ot = next(p);
    o = in_set(ot, OUTCOMES);
    if (o < 0 || (o == 5 && v != V_ENTRY))
      return expected(p, ot, v == V_ENTRY
                                 ? "an outcome (ok, lost, out_of_memory, invalid_argument, error or absent)"
                                 : "an outcome (ok, lost, out_of_memory, invalid_argument or error; absent only after entry)");
    expect = OUTCOMES[o];
    t = peek(p);
  }
  if (t->k != T_EOL)
    return expected(p, t, arrow_ok && !expect ? "'=>' or the end of the line" : "the end of the line");

  /* Declare the new names, mark closes, store the statement. */
  for (int i = 0; i < p->npending; i++) {
    const struct tok *nt = p->pending[i].t;
    struct name *nm = lookup(p, nt->val, nt->vlen);
    if (nm) {
      nm->closed = 0;
      nm->line = p->line;
    } else if (insert(p, nt->val, nt->vlen, p->pending[i].sort, p->line)) {
      return oom(p, nt->col);
    }
  }
  if (v == V_CLOSE || inner == V_CLOSE) {
    const struct tok *dt = &p->toks[v == V_CLOSE ? 1 : 3];
    struct name *nm = lookup(p, dt->val, dt->vlen);
    if (nm) nm->closed = 1;
  }
  if (v == V_SCENARIO) p->scenario_line = p->line;
  else if (v == V_CLAUSES) p->clauses_line = p->line;
  else if (v == V_NEEDS) p->needs_line = p->line;
  else if (v == V_DRIVES) p->drives_line = p->line;
  else if (!p->body_line) p->body_line = p->line;

  if ((size_t)p->s->nstmts == p->stmt_cap) {
    size_t cap = p->stmt_cap ? 2 * p->stmt_cap : 32;
    struct scn_stmt *ns = realloc(p->s->stmts, cap * sizeof *ns);
    if (!ns) return oom(p, vt->col);
    p->s->stmts = ns;
    p->stmt_cap = cap;
  }
  struct scn_stmt *st = &p->s->stmts[p->s->nstmts];
  st->line = p->line;
  st->col = vt->col;
  st->verb = VERBS[v];
  st->nargs = nargs;
  st->expect = expect;
  st->args = arena_alloc(p->s, (size_t)(nargs ? nargs : 1) * sizeof *st->args);
  if (!st->args) return oom(p, vt->col);
  for (int i = 0; i < nargs; i++) {
    const struct tok *a = &p->toks[i + 1];
    struct scn_arg *o = &st->args[i];
    static const enum scn_arg_kind kinds[] = {SCN_WORD, SCN_INT, SCN_STRING, SCN_SEP, SCN_KV};
    o->kind = kinds[a->k];
    o->text = a->val;
    o->len = a->vlen;
    o->ival = a->ival;
    o->key = a->k == T_KV ? a->key : NULL;
    o->line = p->line;
    o->col = a->col;
  }
  p->s->nstmts++;
  return 0;
}

/* ---------------------------------------------------------------- driver */

static int run(struct P *p, const char *text, size_t len) {
  size_t pos = 0;
  int eof_line = 1, eof_col = 1;
  p->line = 0;
  while (pos < len) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - text) : len;
    if (p->line == INT_MAX - 1) return fail(p, 1, "expected at most %d lines, found more", INT_MAX - 1);
    p->line++;
    p->l = text + pos;
    p->llen = end - pos;
    if (p->llen > 0 && p->l[p->llen - 1] == '\r') p->llen--;
    if (p->llen > SCN_MAX_LINE)
      return fail(p, SCN_MAX_LINE + 1, "expected at most %d bytes on a line, found a longer line",
                  SCN_MAX_LINE);
    if (lex_line(p)) return -1;
    if (p->toks[0].k != T_EOL && statement(p)) return -1;
    if (nl) {
      eof_line = p->line + 1;
      eof_col = 1;
    } else {
      eof_line = p->line;
      eof_col = (int)(end - pos) + 1;
    }
    pos = end + (nl ? 1 : 0);
  }
  if (!p->scenario_line)
    return fail_at(p, eof_line, eof_col, "expected 'scenario \"a name\"' as the first statement, found end of file");
  if (!p->clauses_line)
    return fail_at(p, eof_line, eof_col, "expected 'clauses' (the clause IDs it exercises), found end of file");
  return 0;
}

int scn_parse(const char *file, const char *text, size_t len, struct scn_script **out, char *err,
              size_t errlen) {
  struct P *p;
  int r;
  if (out) *out = NULL;
  if (err && errlen) err[0] = 0;
  if (!file) file = "<input>";
  if (!text && len) {
    if (err && errlen) snprintf(err, errlen, "%s:1:1: expected text, found none", file);
    return -1;
  }
  p = calloc(1, sizeof *p);
  if (!p) {
    if (err && errlen) snprintf(err, errlen, "%s:1:1: out of memory", file);
    return -1;
  }
  p->file = file;
  p->err = err;
  p->errlen = errlen;
  p->s = calloc(1, sizeof *p->s);
  if (!p->s) {
    free(p);
    if (err && errlen) snprintf(err, errlen, "%s:1:1: out of memory", file);
    return -1;
  }
  r = run(p, text ? text : "", len);
  free(p->names);
  if (r == 0 && out) *out = p->s;
  else scn_free(p->s);
  free(p);
  return r == 0 ? 0 : -1;
}
