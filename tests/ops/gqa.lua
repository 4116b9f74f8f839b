-- Grouped-query and multi-query attention at odd sizes: q has 6 heads, k
-- and v 2 (groups of 3) or 1; causal (each group's rows folded in position
-- order, the grouped causal mask, primitive ops) and not (a plain reshape,
-- the fused attention kernel), with a padding mask, and keys longer than
-- queries. Each sdpa has k and v of its own: a transpose of k shared by two
-- would have two consumers, which keeps the fusion from taking it.
local B = dim("B", 4)
local T = dim("T", 13)
local q = input("q", f32, { B, 6, T, 10 })
local k = input("k", f32, { B, 2, T, 10 })
local v = input("v", f32, { B, 2, T, 7 })
local k2 = input("k2", f32, { B, 2, T, 10 })
local v2 = input("v2", f32, { B, 2, T, 7 })
local k1 = input("k1", f32, { B, 1, 15, 10 })
local v1 = input("v1", f32, { B, 1, 15, 10 })
local k3 = input("k3", f32, { B, 1, 15, 10 })
local v3 = input("v3", f32, { B, 1, 15, 10 })
local mask = input("mask", i32, { B, T })
-- a product with a weight, so that the gradients reach a parameter
local w = param("w", { 10, 10 })
local qw = matmul(q, w)

output("gqa_causal", sdpa(qw, k, v, { causal = true }))
output("gqa", sdpa(qw, k2, v2, { mask = mask }))
output("mqa_causal", sdpa(qw, k1, v1, { causal = true }))
output("mqa", sdpa(q, k3, v3))
