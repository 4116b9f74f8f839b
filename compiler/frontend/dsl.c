/* compiler/frontend/dsl.c — the globals of the model language: the value
 * types, the declarations and every op (dsl.md lists them). */
#include "fe.h"

void fe_dsl_open(lua_State *L) {
  static const luaL_Reg decls[] = {{"config", fe_l_config}, {"dim", fe_l_dim},         {"input", fe_l_input},
                                   {"param", fe_l_param},   {"output", fe_l_output},   {"include", fe_l_include},
                                   {"print", fe_l_print},   {NULL, NULL}};
  fe_values_open(L);
  lua_pushglobaltable(L);
  luaL_setfuncs(L, decls, 0);
  lua_pop(L, 1);
  fe_ops_register(L);
  fe_move_register(L);
  fe_attn_register(L);
  fe_conv_register(L);
  fe_recurrent_register(L);
  fe_rope_register(L);
  fe_kv_register(L);
}
