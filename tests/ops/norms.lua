-- LayerNorm and RMSNorm on their own and as the prologue of a linear layer.
local B = dim("B", 8)
local T = dim("T", 32)
local x = input("x", f32, { B, T, 129 })
output("ln", layernorm(x, param("ln")))
output("rms", rmsnorm(x, param("rms"), { eps = 1e-5 }))
output("ln_linear", linear(layernorm(x, param("ln2")), 31, param("fc1")))
output("rms_linear", relu(linear(rmsnorm(x, param("rms2")), 31, param("fc2"))))
