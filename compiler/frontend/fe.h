/* compiler/frontend/fe.h — what the front-end's files share (internal to
 * compiler/frontend): the state of one model run, and the helpers every DSL
 * function uses to read its arguments, make graph values and raise errors.
 *
 * Errors: a DSL function that fails fills fe_state.err (status and message
 * with the Lua file:line) and raises that message as the Lua error. When the
 * error that ends the run is that same message, nnc_frontend_load returns its
 * status; any other Lua error is NNC_E_MODEL.
 *
 * Every DSL function may be left by a longjmp at any Lua API call, so none
 * holds malloc'd memory across one: scratch lives on the C stack or in Lua. */
#ifndef NNC_FE_H
#define NNC_FE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "frontend.h"

#define FE_MAX_INCLUDE_DEPTH 16
#define FE_DEFAULT_INSTRUCTIONS 200000000u
#define FE_DEFAULT_MEMORY ((size_t)512 << 20)

typedef struct fe_define {
  const char *text;     /* "name=value" as given */
  size_t name_len;
  const char *value;
  bool used;            /* some config{} had the key */
} fe_define;

typedef struct fe_state {
  lua_State *L;
  nnc_graph *g;
  const char *path;              /* the top model file, as given */
  char root[PATH_MAX];           /* realpath of its folder: includes stay inside */
  char root_given[PATH_MAX + 2]; /* that folder as given, with a final '/' */
  int include_depth;
  fe_define *defines;
  int ndefines;
  FILE *print_to;
  bool training;                 /* the global `training` */
  bool generating;               /* the global `generating` */
  int channel_run;               /* nnc_frontend_opts.channel_run, 8 when it is 0 */
  /* budgets (sandbox.c) */
  uint64_t max_instructions, instructions;
  int hook_every, hook_normal;   /* instructions between hook calls: now, usually */
  size_t max_memory, memory;
  bool over_instructions;
  bool over_memory;              /* past the budget, perhaps only by garbage */
  bool refused;                  /* an allocation was refused: past it for sure */
  bool watching;                 /* memory is past half the budget: the hook keeps ... */
  const char *at_file;           /* ... the running Lua line (file interned in g) */
  int at_line;
  const char *c_file;            /* ... and the line that called the running C function */
  int c_line;
  const void *chunk_seen;        /* the last chunk name met (only compared, never read) */
  const char *chunk_file;        /* and its file, interned */
  nnc_error mem_limit;           /* the budget errors, once raised */
  nnc_error instr_limit;
  nnc_error err;                 /* the last error a DSL function raised */
} fe_state;

/* A shape the front-end writes into an output before inference (reshape, split). */
typedef struct fe_shape {
  int rank;
  nnc_dim dim[NNC_MAX_RANK];
} fe_shape;

/* ------------------------------------------------------------ sandbox.c */

/* Creates the Lua state with the budgets of fe, runs body(L) in protected
 * mode, turns how it ended into a status and message, and closes the state. */
nnc_status fe_sandbox_run(fe_state *fe, lua_CFunction body, nnc_error *err);
/* Opens the allowed libraries and guards the globals (inside body). */
void fe_sandbox_open(lua_State *L);

/* ------------------------------------------------------------ dsl_util.c */

fe_state *fe_get(lua_State *L);
/* The file:line of the Lua code that called the running DSL function. */
nnc_srcloc fe_loc(lua_State *L);
/* The same for a debug record (the hook); the file is interned in the graph. */
nnc_srcloc fe_loc_of(lua_State *L, const char *source, int line);
/* Raises fe->err's message as the Lua error. */
int fe_raise(lua_State *L);
/* Fills fe->err at the caller's line and raises it. */
int fe_fail(lua_State *L, nnc_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Raises fe->err when st is not NNC_OK (the callee filled it). */
void fe_check(lua_State *L, nnc_status st);
/* A short description of the Lua value at idx for messages: nil, 3, "abc",
 * tensor x f32[3], dim B, scope h.3, dtype f32, a table. */
const char *fe_describe(lua_State *L, int idx, char *buf, size_t n);

/* Argument readers: each raises a message naming fn on a wrong value. */
int fe_arg_tensor(lua_State *L, int idx, const char *fn);
/* The first n arguments as tensors ("matmul: expected 2 tensors, found 1"). */
void fe_arg_tensors(lua_State *L, const char *fn, int n, int *ids);
lua_Integer fe_arg_int(lua_State *L, int idx, const char *fn, const char *what);
/* 1-based or negative DSL axis of a tensor of the given rank -> 0-based; nil
 * gives dflt (a DSL axis too). */
int fe_arg_axis(lua_State *L, int idx, int rank, const char *fn, lua_Integer dflt);
/* Argument idx is nil or a table whose keys are all in keys (NULL-ended). */
void fe_arg_opts(lua_State *L, int idx, const char *fn, const char *const *keys);
/* Option `key` of the opts table at idx (absent table: dflt). */
double fe_opt_number(lua_State *L, int idx, const char *fn, const char *key, double dflt);
bool fe_opt_bool(lua_State *L, int idx, const char *fn, const char *key, bool dflt);

/* Adds a node at the caller's line, writes preset output shapes (reshape,
 * split), runs shape inference; raises on any error. Returns the node id. */
int fe_add_node(lua_State *L, nnc_op op, int nin, const int *in, const nnc_attrs *a, int nout,
                const char *label, const fe_shape *preset);
/* Pushes the node's outputs; returns how many. */
int fe_push_outputs(lua_State *L, int node);
/* Output 0 of a node added with fe_add_node. */
int fe_out(lua_State *L, int node);

/* ------------------------------------------------------------ dsl_values.c */

void fe_values_open(lua_State *L);
void fe_push_tensor(lua_State *L, int id);
int fe_tensor_at(lua_State *L, int idx);           /* tensor id, or -1 */
void fe_push_dim(lua_State *L, nnc_dim d);         /* a constant becomes an integer */
bool fe_dim_at(lua_State *L, int idx, nnc_dim *d); /* an integer or a dim */
void fe_push_scope(lua_State *L, const char *prefix);
const char *fe_scope_at(lua_State *L, int idx);    /* its prefix, or NULL */
void fe_push_dtype(lua_State *L, nnc_dtype t);
bool fe_dtype_at(lua_State *L, int idx, nnc_dtype *t);
/* Reads a shape table (numbers, dims, "B" and "B<=32"); who names it in
 * messages ("input x"). With allow_infer one -1 may appear (reshape). */
void fe_arg_shape(lua_State *L, int idx, const char *who, bool allow_infer, fe_shape *s);

/* ------------------------------------------------------------ the DSL */

/* Registers every DSL global (dsl.c). */
void fe_dsl_open(lua_State *L);
/* Loads a model file in text mode and leaves its chunk on the stack; a file
 * that cannot be read is NNC_E_IO, a syntax error NNC_E_MODEL (include.c). */
void fe_load_file(lua_State *L, const char *path, bool from_include);
/* After the model ran: every -D must have named a config key (dsl_decl.c). */
void fe_check_defines(lua_State *L);

int fe_l_config(lua_State *L);
int fe_l_dim(lua_State *L);
int fe_l_input(lua_State *L);
int fe_l_param(lua_State *L);
int fe_l_output(lua_State *L);
int fe_l_print(lua_State *L);
int fe_l_include(lua_State *L);

/* dsl_ops.c */
int fe_l_add(lua_State *L);
int fe_l_sub(lua_State *L);
int fe_l_mul(lua_State *L);
int fe_l_div(lua_State *L);
int fe_l_unm(lua_State *L);
int fe_l_pow(lua_State *L);
void fe_ops_register(lua_State *L);
/* The dtype of parameters an op creates for input x: x's when it is a float. */
nnc_dtype fe_param_dtype(lua_State *L, int x);
/* Creates parameter prefix.suffix with the given constant shape; returns its id. */
int fe_make_param(lua_State *L, const char *prefix, const char *suffix, nnc_dtype t, int rank, const int64_t *dims);   /* sets the op globals */

/* dsl_move.c */
int fe_l_reshape(lua_State *L);
int fe_l_transpose(lua_State *L);
int fe_l_permute(lua_State *L);
void fe_move_register(lua_State *L);

/* dsl_attn.c */
void fe_attn_register(lua_State *L);
/* conv2d, conv1d, pooling, batchnorm, flatten (dsl_conv.c) */
void fe_conv_register(lua_State *L);
/* lstm, gru (dsl_recurrent.c) */
void fe_recurrent_register(lua_State *L);
/* rope (dsl_rope.c) */
void fe_rope_register(lua_State *L);
void fe_kv_register(lua_State *L);

#endif
