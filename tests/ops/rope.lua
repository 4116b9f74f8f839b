-- rope at odd sizes: q-like [B, H, T, D] tensors turned by their time index,
-- by given positions [B, T] (a batch of sequences at different offsets) and
-- [T], a partial rotation (dims < D, the rest passing through), another
-- base, and the time axis named (a [B, T, H, D] layout).
local B = dim("B", 4)
local T = dim("T", 19)
local x = input("x", f32, { B, 3, T, 10 })
local xt = input("xt", f32, { B, T, 3, 6 })
local pos = input("pos", i32, { B, T })
local pos1 = input("pos1", i32, { T })
-- a product with a weight, so that the gradients reach a parameter
local w = param("w", { 10, 10 })

output("plain", rope(x))
output("positions", rope(x, pos, { base = 500 }))
output("positions_t", rope(x, pos1))
output("partial", rope(matmul(x, w), pos, { dims = 4 }))
output("axis", rope(xt, nil, { axis = 2, dims = 6, base = 10 }))
