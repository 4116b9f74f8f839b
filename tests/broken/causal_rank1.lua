-- A causal mask needs scores [..., T, S].
local s = input("s", f32, { 9 })
output("y", causal_mask(s))
