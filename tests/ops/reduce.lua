-- Reductions over each axis, with and without keepdim.
local B = dim("B", 8)
local T = dim("T", 32)
local x = input("x", f32, { B, T, 33 })
output("sum_t", sum(x, 2))
output("mean_c", mean(x, -1, true))
output("max_b", max(x, 1))
output("mean_all", mean(sum(x, 3), 2, true))
