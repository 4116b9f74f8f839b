-- Grouped-query attention: q's 6 heads cannot be shared out over k's 4.
local q = input("q", f32, { 2, 6, 5, 8 })
local k = input("k", f32, { 2, 4, 5, 8 })
output("y", sdpa(q, k, k, { causal = true }))
