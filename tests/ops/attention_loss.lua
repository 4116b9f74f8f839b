-- Attention under --train: one op whose gradient is the flash-attention
-- backward. q, k and v come from linear projections (their weights get the
-- gradients); one head causal, one with a padding mask, one with both, with
-- a head dim (7) and a value dim (5) that are no tile's multiple. k has no
-- bias: softmax ignores what adds the same to every score of a row, so its
-- gradient would be zero, and rounding noise against zero is no check.
local B = dim("B", 4)
local T = dim("T", 33)
local x = input("x", f32, { B, T, 12 })
local mask = input("mask", i32, { B, T })
local target = input("target", f32, { B, 2, T, 5 })
local function heads(h, width, name, bias)
  return transpose(reshape(linear(h, 2 * width, param(name), { bias = bias }), { B, T, 2, width }), 2, 3)
end
local q, k, v = heads(x, 7, "q", true), heads(x, 7, "k", false), heads(x, 5, "v", true)
local a = sdpa(q, k, v, { causal = true })
local b = sdpa(q, k, v, { mask = mask })
local c = sdpa(q, k, v, { causal = true, mask = mask, scale = 0.4 })
local d = a + b * 0.5 + c * 0.25 - target
output("loss", mean(mean(mean(mean(d * d, -1), -1), -1), -1))
