/* compiler/frontend/include.c — loading model files: the top one and those
 * named by include(path). A path is relative to the including file's folder
 * and must stay inside the top model's folder, both as written (no "..") and
 * once symbolic links are resolved. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

void fe_load_file(lua_State *L, const char *path, bool from_include) {
  fe_state *fe = fe_get(L);
  int st = luaL_loadfilex(L, path, "t");
  if (st == LUA_OK) return;
  if (st == LUA_ERRMEM) lua_error(L);
  const char *msg = lua_tostring(L, -1);
  if (st == LUA_ERRFILE) {
    if (from_include) fe_fail(L, NNC_E_IO, "include: %s", msg ? msg : path);
    nnc_errorf(&fe->err, NNC_E_IO, NNC_NOLOC, "%s", msg ? msg : path);
  } else {
    /* a syntax error: Lua's message names the file and line */
    nnc_errorf(&fe->err, NNC_E_MODEL, NNC_NOLOC, "%s", msg ? msg : path);
  }
  fe_raise(L);
}

/* Collapses "//", "." and ".." of an absolute path in place; false when ".."
 * would go above "/". */
static bool normalize(char *p) {
  char out[PATH_MAX];
  size_t n = 0;
  const char *s = p;
  while (*s) {
    while (*s == '/') s++;
    const char *e = s;
    while (*e && *e != '/') e++;
    size_t len = (size_t)(e - s);
    if (len == 0 || (len == 1 && s[0] == '.')) {
      /* nothing */
    } else if (len == 2 && s[0] == '.' && s[1] == '.') {
      if (n == 0) return false;
      while (n > 0 && out[n - 1] != '/') n--;
      n--;   /* the '/' before the segment */
    } else {
      if (n + 1 + len >= sizeof out) return false;
      out[n++] = '/';
      memcpy(out + n, s, len);
      n += len;
    }
    s = e;
  }
  if (n == 0) out[n++] = '/';
  out[n] = 0;
  memcpy(p, out, n + 1);
  return true;
}

static bool inside(const char *root, const char *p) {
  size_t n = strlen(root);
  if (strcmp(root, "/") == 0) return true;
  return strncmp(p, root, n) == 0 && (p[n] == '/' || p[n] == 0);
}

/* The source path of the Lua function that called include(). */
static const char *including_file(lua_State *L) {
  lua_Debug ar;
  for (int level = 1; level < 64 && lua_getstack(L, level, &ar); level++)
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0 && ar.source[0] == '@') {
      lua_pushstring(L, ar.source + 1);   /* kept on the stack while in use */
      return lua_tostring(L, -1);
    }
  return fe_get(L)->path;
}

int fe_l_include(lua_State *L) {
  fe_state *fe = fe_get(L);
  char d[256];
  if (lua_type(L, 1) != LUA_TSTRING || !lua_tostring(L, 1)[0])
    return fe_fail(L, NNC_E_MODEL, "include: expected a path, found %s", fe_describe(L, 1, d, sizeof d));
  const char *path = lua_tostring(L, 1);
  lua_settop(L, 1);
  if (path[0] == '/')
    return fe_fail(L, NNC_E_MODEL, "include: expected a path relative to the including file, found \"%s\"", path);
  if (fe->include_depth >= FE_MAX_INCLUDE_DEPTH)
    return fe_fail(L, NNC_E_MODEL, "include: expected at most %d nested includes", FE_MAX_INCLUDE_DEPTH);
  const char *from = including_file(L);
  const char *slash = strrchr(from, '/');
  int dir_len = slash ? (int)(slash - from) : 0;
  char joined[PATH_MAX], dir[PATH_MAX], real[PATH_MAX], lexical[PATH_MAX];
  int n = slash ? snprintf(joined, sizeof joined, "%.*s/%s", dir_len, from, path)
                : snprintf(joined, sizeof joined, "%s", path);
  if (n < 0 || (size_t)n >= sizeof joined)
    return fe_fail(L, NNC_E_MODEL, "include: the path \"%s\" is too long", path);
  snprintf(dir, sizeof dir, "%.*s", slash ? dir_len : 1, slash ? from : ".");
  if (slash && dir_len == 0) snprintf(dir, sizeof dir, "/");
  if (!realpath(dir, real))
    return fe_fail(L, NNC_E_IO, "include: cannot resolve the folder %s: %s", dir, strerror(errno));
  n = snprintf(lexical, sizeof lexical, "%s/%s", real, path);
  bool ok = n > 0 && (size_t)n < sizeof lexical && normalize(lexical) && inside(fe->root, lexical);
  if (ok && realpath(joined, real)) ok = inside(fe->root, real);
  if (!ok) return fe_fail(L, NNC_E_MODEL, "include: \"%s\" leaves the model's folder %s", path, fe->root_given);
  fe_load_file(L, joined, true);
  /* the depth is restored even when the included file fails and the model
   * catches the error with pcall */
  fe->include_depth++;
  int base = lua_gettop(L) - 1;
  int st = lua_pcall(L, 0, LUA_MULTRET, 0);
  fe->include_depth--;
  if (st != LUA_OK) return lua_error(L);
  return lua_gettop(L) - base;
}
