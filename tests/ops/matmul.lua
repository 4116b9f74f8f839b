-- Matmul with batch broadcasting, linear with in_out weights, bias and residual.
local B = dim("B", 8)
local T = dim("T", 32)
local a = input("a", f32, { B, 3, T, 17 })
local b2 = input("b2", f32, { 17, 9 })        -- broadcast over every batch dim
local b3 = input("b3", f32, { 3, 17, 9 })     -- broadcast over B
local b4 = input("b4", f32, { B, 1, 17, 9 })  -- broadcast over the heads
output("mm2", matmul(a, b2))
output("mm3", matmul(a, b3))
output("mm4", matmul(a, b4))
local x = input("x", f32, { B, T, 129 })
local h = linear(x, 33, param("fc"), { layout = "in_out" })
output("lin", gelu(h) + linear(x, 33, param("res")))
output("lin_nobias", linear(x, 33, param("nb"), { bias = false }) * 0.25)
