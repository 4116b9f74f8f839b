-- Scores [B,4,T,T] need a mask [B,T]; this one is [B,T+1] wide.
local B = dim("B", 8)
local s = input("s", f32, { B, 4, 6, 6 })
local m = input("m", i32, { B, 7 })
output("y", padding_mask(s, m))
