/* OCaml binding of the scenario parser (scn_parse.h): builds the
 * statements as values of Scenario_syntax.stmt directly, or the error
 * text.  The input is copied out of the OCaml heap first, so no OCaml
 * value is read while C values are being built. */
#include <stdlib.h>
#include <string.h>

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#include "scn_parse.h"

/* Must follow the constructors of Scenario_syntax.arg:
 * Word of string | Int of int | Str of string | Sep | Kv of string * string */
#define TAG_WORD 0
#define TAG_INT 1
#define TAG_STR 2
#define TAG_KV 3
#define VAL_SEP Val_int(0)

static value arg_value(const struct scn_arg *a) {
  CAMLparam0();
  CAMLlocal3(r, s, k);
  switch (a->kind) {
  case SCN_WORD:
  case SCN_STRING:
    s = caml_alloc_initialized_string(a->len, a->text);
    r = caml_alloc_small(1, a->kind == SCN_WORD ? TAG_WORD : TAG_STR);
    Field(r, 0) = s;
    break;
  case SCN_INT:
    r = caml_alloc_small(1, TAG_INT);
    Field(r, 0) = Val_long(a->ival);
    break;
  case SCN_SEP:
    r = VAL_SEP;
    break;
  case SCN_KV:
    k = caml_copy_string(a->key);
    s = caml_alloc_initialized_string(a->len, a->text);
    r = caml_alloc_small(2, TAG_KV);
    Field(r, 0) = k;
    Field(r, 1) = s;
    break;
  }
  CAMLreturn(r);
}

/* { line; col; verb; args; expect; cols } */
static value stmt_value(const struct scn_stmt *st) {
  CAMLparam0();
  CAMLlocal5(r, verb, args, cell, a);
  CAMLlocal3(expect, e, cols);
  args = Val_emptylist;
  cols = Val_emptylist;
  for (int i = st->nargs - 1; i >= 0; i--) {
    a = arg_value(&st->args[i]);
    cell = caml_alloc_small(2, 0);
    Field(cell, 0) = a;
    Field(cell, 1) = args;
    args = cell;
    cell = caml_alloc_small(2, 0);
    Field(cell, 0) = Val_int(st->args[i].col);
    Field(cell, 1) = cols;
    cols = cell;
  }
  verb = caml_copy_string(st->verb);
  expect = Val_none;
  if (st->expect) {
    e = caml_copy_string(st->expect);
    expect = caml_alloc_some(e);
  }
  r = caml_alloc_small(6, 0);
  Field(r, 0) = Val_int(st->line);
  Field(r, 1) = Val_int(st->col);
  Field(r, 2) = verb;
  Field(r, 3) = args;
  Field(r, 4) = expect;
  Field(r, 5) = cols;
  CAMLreturn(r);
}

/* file -> text -> (stmt list, string) result */
value caml_scn_parse(value vfile, value vtext) {
  CAMLparam2(vfile, vtext);
  CAMLlocal4(res, list, cell, s);
  size_t len = caml_string_length(vtext);
  char *file = strdup(String_val(vfile));
  char *text = malloc(len ? len : 1);
  char err[1024];
  struct scn_script *script = NULL;
  if (!file || !text) {
    free(file);
    free(text);
    caml_raise_out_of_memory();
  }
  memcpy(text, String_val(vtext), len);
  int rc = scn_parse(file, text, len, &script, err, sizeof err);
  free(file);
  free(text);
  if (rc != 0) {
    s = caml_copy_string(err);
    res = caml_alloc_small(1, 1); /* Error */
    Field(res, 0) = s;
    CAMLreturn(res);
  }
  list = Val_emptylist;
  for (int i = script->nstmts - 1; i >= 0; i--) {
    s = stmt_value(&script->stmts[i]); /* may raise Out_of_memory: leaks script then */
    cell = caml_alloc_small(2, 0);
    Field(cell, 0) = s;
    Field(cell, 1) = list;
    list = cell;
  }
  scn_free(script);
  res = caml_alloc_small(1, 0); /* Ok */
  Field(res, 0) = list;
  CAMLreturn(res);
}
