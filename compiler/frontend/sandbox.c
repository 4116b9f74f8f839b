/* compiler/frontend/sandbox.c — the Lua state a model runs in: only the
 * base, string, table, math and utf8 libraries; no loading of files or code
 * except through include(); an instruction budget (a count hook) and a memory
 * budget (the allocator). No Lua error leaves fe_sandbox_run as a panic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "fe.h"

/* Names a model may not read: the message says why instead of "nil". */
static const char *const forbidden[] = {"io", "os", "package", "debug", "require",
                                        "dofile", "loadfile", "load", NULL};

/* Base functions that load code or files, or steer the collector. */
static const char *const removed[] = {"dofile", "loadfile", "load", "require", "collectgarbage", NULL};

/* Instructions between two calls of the count hook. */
#define HOOK_EVERY 1000

static void fmt_bytes(size_t n, char *buf, size_t len) {
  if (n && n % ((size_t)1 << 20) == 0) snprintf(buf, len, "%zu MiB", n >> 20);
  else if (n && n % 1024 == 0) snprintf(buf, len, "%zu KiB", n >> 10);
  else snprintf(buf, len, "%zu bytes", n);
}

static void hook(lua_State *L, lua_Debug *ar);

static void arm_hook(fe_state *fe, int every) {
  fe->hook_every = every;
  int watch = fe->watching ? LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE : 0;
  lua_sethook(fe->L, hook, LUA_MASKCOUNT | watch, every);
}

/* The file of a chunk name, interned. Chunk names of functions that have
 * returned may be freed, so the pointer kept is only compared. */
static const char *file_of(fe_state *fe, const char *source) {
  if (source != fe->chunk_seen) {
    fe->chunk_seen = source;
    fe->chunk_file = nnc_graph_intern(fe->g, source[0] == '@' ? source + 1 : source);
  }
  return fe->chunk_file;
}

/* Near the memory budget the hook follows lines, calls and returns, so that
 * an allocation the allocator refuses (Lua reports that without a position)
 * can still name its line: the line calling the running C function
 * (string.rep, table.concat), else the running Lua line. */
static void watch(lua_State *L, lua_Debug *ar) {
  fe_state *fe = fe_get(L);
  if (!lua_getinfo(L, "S", ar)) return;
  if (ar->event == LUA_HOOKLINE) {
    fe->at_file = file_of(fe, ar->source);
    fe->at_line = ar->currentline;
    return;
  }
  bool c = ar->what[0] == 'C';
  lua_Debug up;
  if (ar->event == LUA_HOOKRET) {
    if (c) fe->c_file = NULL;
    else if (lua_getstack(L, 1, &up) && lua_getinfo(L, "Sl", &up) && up.currentline > 0) {
      fe->at_file = file_of(fe, up.source);
      fe->at_line = up.currentline;
    }
    return;
  }
  if (!c) return;
  fe->c_file = NULL;
  for (int level = 1; level < 64 && lua_getstack(L, level, &up); level++)
    if (lua_getinfo(L, "Sl", &up) && up.currentline > 0) {
      fe->c_file = file_of(fe, up.source);
      fe->c_line = up.currentline;
      break;
    }
}

/* The budget error for a refused allocation, at the line watch() kept. */
static void refused_error(fe_state *fe) {
  const char *file = fe->c_file ? fe->c_file : fe->at_file;
  int line = fe->c_file ? fe->c_line : fe->at_line;
  if (!fe->watching || !file || line <= 0 || fe->mem_limit.code == NNC_E_LIMIT) return;
  char what[64];
  fmt_bytes(fe->max_memory, what, sizeof what);
  nnc_errorf(&fe->mem_limit, NNC_E_LIMIT, (nnc_srcloc){file, line}, "memory budget of %s exceeded", what);
}

/* Raises a budget error at the running Lua line (the first one of its kind
 * keeps its line); the budget stays exceeded, so a model that catches it
 * with pcall is stopped again at once. */
static void limit_error(lua_State *L, lua_Debug *ar, nnc_error *limit, const char *fmt, const char *what) {
  fe_state *fe = fe_get(L);
  nnc_srcloc loc = NNC_NOLOC;
  if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0) loc = (nnc_srcloc){file_of(fe, ar->source), ar->currentline};
  if (limit->code != NNC_E_LIMIT) nnc_errorf(limit, NNC_E_LIMIT, loc, fmt, what);
  fe->err = *limit;
  arm_hook(fe, 1);
  fe_raise(L);
}

static void hook(lua_State *L, lua_Debug *ar) {
  fe_state *fe = fe_get(L);
  if (ar->event != LUA_HOOKCOUNT) {
    watch(L, ar);
    return;
  }
  fe->instructions += (uint64_t)fe->hook_every;
  char what[64];
  if (fe->over_memory && !fe->refused) {
    /* the allocation that crossed the budget was granted: see whether what
     * the model still holds fits once its garbage is gone */
    lua_gc(L, LUA_GCCOLLECT);
    if (fe->memory <= fe->max_memory) {
      fe->over_memory = false;
      fe->mem_limit.code = NNC_OK;
    }
  }
  if (fe->over_memory) {
    fmt_bytes(fe->max_memory, what, sizeof what);
    limit_error(L, ar, &fe->mem_limit, "memory budget of %s exceeded", what);
  }
  if (fe->instructions > fe->max_instructions) {
    fe->over_instructions = true;
    snprintf(what, sizeof what, "%llu", (unsigned long long)fe->max_instructions);
    limit_error(L, ar, &fe->instr_limit, "instruction budget of %s exceeded (an endless loop?)", what);
  }
  if (fe->watching && fe->memory < fe->max_memory / 4) {
    fe->watching = false;
    arm_hook(fe, fe->hook_normal);
  }
  if (fe->hook_every != fe->hook_normal) arm_hook(fe, fe->hook_normal);
}

/* The memory budget. An allocation that crosses it is granted when it is
 * modest (under half the budget, and the total under twice it) and the hook
 * checks at the next instruction, after a full collection, where Lua can
 * still name the line. A larger one is refused; Lua reports that without a
 * position, so the line is the one watch() kept, when it is watching. */
static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  fe_state *fe = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    fe->memory -= old;
    return NULL;
  }
  size_t after = fe->memory - old + nsize;
  if (fe->L && !fe->watching && after > fe->max_memory / 2) {
    fe->watching = true;
    fe->at_file = fe->c_file = NULL;
    arm_hook(fe, fe->hook_every);
  }
  if (nsize > old && after > fe->max_memory) {
    fe->over_memory = true;
    if (fe->L) arm_hook(fe, 1);
    if (!fe->L || after / 2 > fe->max_memory || nsize > fe->max_memory / 2) {
      fe->refused = true;
      refused_error(fe);
      return NULL;
    }
  }
  void *p = realloc(ptr, nsize);
  if (p) fe->memory = after;
  return p;
}

/* Reading io, os, ... is an error at the line that did it. */
static int global_index(lua_State *L) {
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  for (int i = 0; k && forbidden[i]; i++)
    if (strcmp(k, forbidden[i]) == 0)
      return fe_fail(L, NNC_E_MODEL, "%s is not available in a model (the sandbox has no file or OS access)", k);
  return 0;
}

/* setmetatable without __gc: Lua runs finalizers with hooks off, so a
 * finalizer would run outside the instruction budget. */
static int guarded_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return fe_fail(L, NNC_E_MODEL,
                     "setmetatable: __gc is not available in a model (finalizers would run outside the instruction budget)");
    lua_pop(L, 1);
  }
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 2, 1);
  return 1;
}

void fe_sandbox_open(lua_State *L) {
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},       {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
                                  {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
  for (const luaL_Reg *l = libs; l->name; l++) {
    luaL_requiref(L, l->name, l->func, 1);
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
  for (int i = 0; removed[i]; i++) {
    lua_pushnil(L);
    lua_setfield(L, -2, removed[i]);
  }
  lua_getfield(L, -1, "setmetatable");
  lua_pushcclosure(L, guarded_setmetatable, 1);
  lua_setfield(L, -2, "setmetatable");
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, global_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
}

/* Message handler: error objects that are not strings become text here, where
 * a __tostring may still run protected. */
static int message_handler(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING) return 1;
  if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
  if (lua_type(L, 1) == LUA_TNUMBER) {
    luaL_tolstring(L, 1, NULL);
    return 1;
  }
  nnc_error e;
  nnc_errorf(&e, NNC_E_MODEL, fe_loc(L), "error: expected a message string, found a %s value", luaL_typename(L, 1));
  lua_pushstring(L, e.msg);
  return 1;
}

static void copy_error(nnc_error *err, nnc_status code, const char *msg) {
  if (!err) return;
  err->code = code;
  snprintf(err->msg, sizeof err->msg, "%s", msg);
}

/* The message when the budget was crossed where Lua could name no line. */
static nnc_status memory_error(fe_state *fe, nnc_error *err) {
  if (fe->mem_limit.code == NNC_E_LIMIT) {
    copy_error(err, NNC_E_LIMIT, fe->mem_limit.msg);
    return NNC_E_LIMIT;
  }
  char what[64];
  fmt_bytes(fe->max_memory, what, sizeof what);
  return nnc_errorf(err, NNC_E_LIMIT, NNC_NOLOC, "%s: memory budget of %s exceeded", fe->path, what);
}

nnc_status fe_sandbox_run(fe_state *fe, lua_CFunction body, nnc_error *err) {
  lua_State *L = lua_newstate(alloc, fe);
  if (!L) {
    if (fe->over_memory) return memory_error(fe, err);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "%s: out of memory while starting Lua", fe->path);
  }
  fe->L = L;
  *(fe_state **)lua_getextraspace(L) = fe;
  fe->hook_normal = fe->max_instructions < HOOK_EVERY ? (int)fe->max_instructions : HOOK_EVERY;
  arm_hook(fe, fe->hook_normal);
  /* pushing light C functions allocates nothing: these cannot raise */
  lua_pushcfunction(L, message_handler);
  lua_pushcfunction(L, body);
  int status = lua_pcall(L, 0, 0, 1);
  const char *msg = status != LUA_OK && lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  nnc_status st = NNC_OK;
  if (fe->over_memory) {
    st = memory_error(fe, err);
  } else if (fe->over_instructions) {
    copy_error(err, NNC_E_LIMIT, fe->instr_limit.msg);
    st = NNC_E_LIMIT;
  } else if (status == LUA_OK) {
    st = NNC_OK;
  } else if (status == LUA_ERRMEM) {
    st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "%s: out of memory while running the model", fe->path);
  } else if (msg && fe->err.code != NNC_OK && strcmp(msg, fe->err.msg) == 0) {
    copy_error(err, fe->err.code, fe->err.msg);
    st = fe->err.code;
  } else {
    copy_error(err, NNC_E_MODEL, msg ? msg : "the model failed with an error that is not a string");
    st = NNC_E_MODEL;
  }
  fe->L = NULL;
  lua_close(L);
  return st;
}
