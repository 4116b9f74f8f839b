-- Masks on scores outside attention: causal and padding, then softmax.
local B = dim("B", 8)
local T = dim("T", 32)
local scores = input("scores", f32, { B, 3, T, T })
local keep = input("keep", i32, { B, T })    -- 1 = token, 0 = padding
local m = padding_mask(causal_mask(scores), keep)
output("masked", m * 1)
output("probs", softmax(m))
