#include <caml/mlvalues.h>
#include <caml/bigarray.h>
#include <caml/alloc.h>
#include <stdint.h>
/* The address of a bigarray's first byte, for map_host. */
value rg2_addr(value ba) { return caml_copy_nativeint((intnat)(uintptr_t)Caml_ba_data_val(ba)); }
